"""Figures derived from measured ones (never new measurements): amortization
curves, memory relative to eager, roofline placement. Filled in by the runner
before every save, so results.json carries them for reports and diffs."""
from __future__ import annotations

from .results import RunResults
from .roofline import place

AMORTIZATION_CALLS = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000]


def amortization_curve(compile_s: float, latency_ms: float, eager_ms: float) -> list[dict[str, float]]:
    """Cumulative seconds after n calls: compile + n x latency against n x eager latency."""
    return [{"calls": n, "compiled_s": compile_s + n * latency_ms / 1e3, "eager_s": n * eager_ms / 1e3}
            for n in AMORTIZATION_CALLS]


def fill_derived(results: RunResults) -> None:
    eager_mem = {c.label: c.peak_rss_delta_mb for c in results.cells
                 if c.backend == "eager" and c.status == "ok"}
    ceilings = results.experiments.get("roofline_ceilings")
    for cell in results.cells:
        if cell.status != "ok" or cell.latency_ms is None:
            continue
        if cell.backend != "eager" and cell.compile_s is not None and cell.eager_latency_ms:
            cell.amortization = amortization_curve(cell.compile_s, cell.latency_ms.median, cell.eager_latency_ms)
        base = eager_mem.get(cell.label)
        if base and cell.peak_rss_delta_mb is not None:
            cell.peak_rss_ratio_vs_eager = cell.peak_rss_delta_mb / base
        if ceilings and cell.work:
            cell.roofline = place(cell.work, cell.latency_ms.median, ceilings)
