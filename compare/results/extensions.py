"""What the layers above the records add to them: per-cell derived figures and
results.csv columns. The scenarios (``compare.scenarios``) bring their own, and records
cannot import them (layers import downward), so they register here when imported."""
from __future__ import annotations

from typing import Any, Callable

# A cell (compare.results.schema.Cell; not imported: schema imports this module), and for
# its figures the run's configuration (results.json's "config")
CellFigures = Callable[[Any, dict[str, Any]], None]
CellColumns = Callable[[Any], dict[str, Any]]

_figures: list[CellFigures] = []
_columns: list[CellColumns] = []


def register(figures: CellFigures, columns: CellColumns) -> None:
    """Add one extension's derived figures and CSV columns (once, however often called)."""
    if figures not in _figures:
        _figures.append(figures)
    if columns not in _columns:
        _columns.append(columns)


def _registered() -> None:
    # Silently missing figures would read as a scenario that measured nothing.
    if not _figures:
        raise RuntimeError("no scenario registered its figures: import compare.scenarios before deriving or "
                           "writing results")


def cell_figures() -> list[CellFigures]:
    _registered()
    return list(_figures)


def cell_columns() -> list[CellColumns]:
    _registered()
    return list(_columns)
