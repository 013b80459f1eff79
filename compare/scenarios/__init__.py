"""Scenarios, one module each, behind the interface in ``compare.scenarios.base``.

A scenario is found, not listed, as backends are (``adapters``): every module of this
package that defines a ``Scenario`` subclass with a ``name`` brings it, and another
installed package can add one through the ``dlcompare.scenarios`` entry-point group
(``name = "package.module:Class"``). The command line,
the worker, the records and the reports loop over ``scenarios()``; none names one.
Importing this package also registers each scenario's derived figures and CSV columns
with the records (``compare.results.extensions``), which cannot import it."""
from __future__ import annotations

import functools

from adapters.plugins import named_classes
from compare.results import extensions

from .base import Panels, ReportSection, Scenario

__all__ = ["DEFAULT", "Panels", "ReportSection", "Scenario", "cell_scenario", "claiming", "scenario", "scenario_names",
           "scenarios"]

DEFAULT = "back-to-back"  # the scenario of a run, or of a record, that names none
ENTRY_POINT_GROUP = "dlcompare.scenarios"


@functools.cache
def scenarios() -> dict[str, Scenario]:
    """Every scenario by name, in the order of ``Scenario.rank``."""
    classes = named_classes(__path__, __name__, Scenario, ENTRY_POINT_GROUP)
    found = sorted((cls() for cls in classes.values()), key=lambda s: (s.rank, s.name))
    return {s.name: s for s in found}


def scenario_names() -> list[str]:
    return list(scenarios())


def scenario(name: str | None) -> Scenario:
    """The scenario called ``name`` (the default one for None)."""
    try:
        return scenarios()[name or DEFAULT]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r} (known: {', '.join(scenarios())})") from None


def claiming(tags: tuple[str, ...]) -> Scenario | None:
    """The scenario that claims a workload with these tags (``Scenario.claims``), if one does."""
    return next((s for s in scenarios().values() if s.claims(tuple(tags))), None)


def cell_scenario(tags: tuple[str, ...], run_scenario: str) -> str:
    """The scenario a cell of a workload with these tags runs in a run of ``run_scenario``."""
    claimer = claiming(tags)
    return claimer.name if claimer is not None else run_scenario


def _register() -> None:
    for each in scenarios().values():
        extensions.register(figures=each.derive, columns=each.csv_columns)


_register()
