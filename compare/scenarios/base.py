"""The interface of a scenario: how a run issues calls (``--scenario``), and everything
that follows from it, declared in one place.

A scenario module defines one ``Scenario`` subclass with a ``name``. Every hook has a
default that does nothing, so a scenario declares only what it changes: the timing
fields it sets, how a worker times each side, what the cell records and derives from
that, its results.csv columns, its header text and its report sections."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from compare.measure.timing import Timed
from compare.results.protocol import CellSpec
from compare.results.schema import Cell, RunResults


class Panels(Protocol):
    """The report's plotting helpers, handed to a section's plot (the report sits above
    the scenarios, so they cannot import it)."""

    def ok_cells(self, results: RunResults) -> list[Cell]: ...

    def workload_panels(self, cells: list[Cell]) -> tuple[Any, list[Any], list[str]]: ...

    def finish(self, fig: Any, axes: list[Any], used: int, title: str) -> str: ...


class RunOptions(Protocol):
    """The command line's way of declaring a scenario's run options (compare.cli): argparse's
    keywords; the values ``option_values`` makes of them are the run's ``scenario_options``,
    checked on resume."""

    positive_int: Callable[[str], int]
    positive_float: Callable[[str], float]

    def add(self, flag: str, **kwargs: Any) -> Any: ...


@dataclass
class ReportSection:
    """One table of a report, with its note and an optional plot; the text and HTML
    reports render every scenario's sections the same way."""

    title: str  # the heading, as markdown and HTML print it
    rows: list[dict[str, Any]]  # one dict per row, its keys the columns
    note: str = ""
    rich_title: str = ""  # the terminal table's title, when it says more than the heading
    plot_title: str = ""  # the HTML plot's heading
    plot: Callable[[RunResults, Panels], str | None] | None = field(default=None, repr=False)


# The sides a worker times, by name ("eager", "fp32_eager", "backend"): (compiled, prepared).
Sides = dict[str, tuple[Any, Any]]


class Scenario:
    """A way of issuing calls. Subclasses set ``name`` and ``help`` and override the hooks
    they need."""

    name: str = ""
    help: str = ""  # --scenario's help for this choice
    rank: int = 100  # the order of --scenario's choices and help; the default scenario first
    # "module:function" that measures this scenario's cells in a worker, in place of the
    # generic steps (compare.worker.steps), for a scenario whose cell is not one timed call
    worker: str | None = None
    # True where ``claims`` is overridden: such a scenario runs only the workloads it claims
    claims_workloads: bool = False

    # the command line and the run's configuration
    def claims(self, tags: tuple[str, ...]) -> bool:
        """True: every cell of a workload with these tags runs this scenario, whatever the
        run's (decode: a decoder's cells generate)."""
        return False

    def add_options(self, options: RunOptions) -> None:
        """Declare this scenario's own run options."""

    def option_values(self, args: argparse.Namespace, chosen: bool) -> dict[str, Any]:
        """This scenario's option values, plain JSON (``chosen``: the run's scenario): the run's
        ``scenario_options``, which reach each cell's spec as they are; raises ValueError for
        an option of it given in another scenario."""
        return {}

    def timing(self, timing: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
        """The TimingConfig fields the run sets, as this scenario changes them."""
        return timing

    # the worker
    def before_torch(self, spec: CellSpec) -> None:
        """Refuse the cell (``adapters.BackendUnavailable``) before torch loads, when this
        scenario cannot run it here."""

    def timed_sides(self, sides: Sides, spec: CellSpec) -> tuple[list[Timed], dict[str, Any] | None]:
        """What the alternating sampler times for each side, in order, and what each side
        ran with (None: nothing to record). By default each side's call, as compiled."""
        return [Timed(c.run, p, c.synchronize) for c, p in sides.values()], None

    def cell_info(self, recorded: dict[str, Any] | None, batch: int) -> dict[str, Any]:
        """What the cell's ``info`` records of ``timed_sides``' settings, at the cell's batch."""
        return {}

    def after_timing(self, compiled: Any, prepared: Any, setup: Any, spec: CellSpec, timed: dict[str, Any],
                     emit: Callable[..., None]) -> dict[str, Any]:
        """What the cell measures after its timing (``timed``: the latencies), as
        CellMeasurement's fields; ``emit`` reports the worker's phases."""
        return {}

    # the records
    def derive(self, cell: Cell, config: dict[str, Any]) -> None:
        """Fill the cell's figures derived from what this scenario measured, in a run of
        ``config`` (results.json's)."""

    def csv_columns(self, cell: Cell) -> dict[str, Any]:
        """results.csv's columns for this scenario's figures (none for other cells)."""
        return {}

    # the reports
    def header(self, config: dict[str, Any]) -> str:
        """The scenario with its parameters, as a report's conditions state it."""
        return self.name

    def sections(self, results: RunResults) -> list[ReportSection]:
        """The report's tables of this scenario's figures (only those with rows are shown)."""
        return []

