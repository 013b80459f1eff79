"""Offline batch sweeps: where an offline run timed one workload and backend at several
batches (``--batch 1,8,32``), the batch at which that backend gave the most samples/s, the
figure the issue asks for of backends without a multi-stream mode (TVM, Inductor). Read-only,
from the cells' ``throughput``."""
from __future__ import annotations

from typing import Any

from compare.results.schema import Cell, RunResults, variant_label

BEST_BATCH_NOTE = ("Best batch: per workload, precision and backend timed offline at several batches (the run's "
                   "--batch list), the batch with the most samples/s (inferences/s x batch, from each batch's own cell), "
                   "i.e. the batch this backend would choose for throughput. 'within 95% CI' names a batch whose "
                   "samples/s interval overlaps the best one's: the two are not told apart by this run.")

Group = tuple[str, str, str, str]  # workload, size, dtype, backend


def _group(cell: Cell) -> Group:
    return cell.workload, cell.size, cell.dtype, cell.backend


def _samples_per_s(cell: Cell) -> float | None:
    tp = cell.scenario.throughput or {}
    return tp.get("samples_per_s") if cell.status == "ok" and tp.get("batch") else None


def _samples_ci(cell: Cell) -> tuple[float, float] | None:
    """samples/s's 95% interval: the inferences/s interval times the batch."""
    tp = cell.scenario.throughput or {}
    ci = tp.get("ci")
    return (ci[0] * tp["batch"], ci[1] * tp["batch"]) if ci else None


def batch_sweeps(results: RunResults) -> dict[Group, list[Cell]]:
    """The offline cells with samples/s, by (workload, size, dtype, backend), for the groups
    timed at two or more batches; each group's cells from the most samples/s down."""
    groups: dict[Group, list[Cell]] = {}
    for cell in results.cells:
        if _samples_per_s(cell) is not None:
            groups.setdefault(_group(cell), []).append(cell)
    sweeps = {}
    for key, cells in groups.items():
        if len({c.scenario.throughput["batch"] for c in cells}) >= 2:
            sweeps[key] = sorted(cells, key=lambda c: -float(_samples_per_s(c) or 0.0))
    return sweeps


def best_batch_cells(results: RunResults) -> set[int]:
    """``id`` of each sweep's best cell (the offline table marks those rows)."""
    return {id(cells[0]) for cells in batch_sweeps(results).values()}


def _ties(cells: list[Cell]) -> str:
    """The batches whose samples/s interval reaches the best one's (never the best itself)."""
    best = _samples_ci(cells[0])
    if best is None:
        return "-"
    tied = [c.scenario.throughput["batch"] for c in cells[1:] if (ci := _samples_ci(c)) is not None and ci[1] >= best[0]]
    return ", ".join(f"b{b}" for b in tied) or "none"


def best_batch_rows(results: RunResults) -> list[dict[str, Any]]:
    """One row per swept (workload, backend): the best batch, its samples/s, every batch's."""
    rows = []
    for (workload, _size, dtype, backend), cells in batch_sweeps(results).items():
        best = cells[0]
        by_batch = sorted(cells, key=lambda c: c.scenario.throughput["batch"])
        rows.append({"workload": variant_label(workload, None, dtype), "backend": backend,
                     "best batch": best.scenario.throughput["batch"], "samples/s": f"{_samples_per_s(best):.4g}",
                     "within 95% CI": _ties(cells),
                     "samples/s by batch": ", ".join(f"b{c.scenario.throughput['batch']}: {_samples_per_s(c):.4g}"
                                                     for c in by_batch),
                     "streams": best.scenario.throughput.get("streams")})
    return rows
