"""The roofline's arithmetic on measured figures: where a cell sits under the machine's
ceilings, and which cells exceed them (the counting and the ceilings are measured in
``compare.experiments.roofline``)."""
from __future__ import annotations

from typing import Any


def place(work: dict[str, Any] | None, latency_ms: float | None, ceilings: dict[str, Any] | None) -> dict[str, Any] | None:
    """Achieved rates and the fraction of the roofline bound reached (1.0 = at the roof)."""
    if not work or not latency_ms or not ceilings:
        return None
    seconds = latency_ms / 1e3
    peak_flops = ceilings["peak_gflops"] * 1e9
    peak_bw = ceilings["peak_gbps"] * 1e9
    flops, nbytes = work["flops"], work["min_bytes"]
    bound_s = max(flops / peak_flops, nbytes / peak_bw)
    return {
        "achieved_gflops": flops / seconds / 1e9,
        "achieved_gbps": nbytes / seconds / 1e9,
        "arithmetic_intensity": flops / nbytes if nbytes else None,
        "bound": "compute" if flops / peak_flops >= nbytes / peak_bw else "memory",
        "bound_ms": bound_s * 1e3,
        "fraction_of_roofline": bound_s / seconds,
    }



def ceiling_check(results_cells, ceilings: dict[str, Any]) -> list[str]:
    """Cells whose achieved rate exceeds a measured ceiling, each with the likely reason:
    the ceilings bound what every backend reached, or this says where they do not."""
    notes = []
    llc = ceilings.get("last_level_cache_mb")
    for cell in results_cells:
        placed = cell.instruments.roofline
        if not placed:
            continue
        if placed["achieved_gflops"] > ceilings["peak_gflops"]:
            notes.append(f"{cell.label} / {cell.backend}: {placed['achieved_gflops']:.1f} GFLOP/s exceeds the "
                         f"compute ceiling (counted FLOPs are estimates for pointwise ops; the matmul ceiling "
                         f"is not the machine's peak)")
        if placed["achieved_gbps"] > ceilings["peak_gbps"]:
            mb = cell.instruments.work["min_bytes"] / 2**20
            why = (f"its {mb:.1f} MB fit in the {llc:.0f} MB last-level cache" if llc and mb < llc
                   else "data reuse from caches")
            notes.append(f"{cell.label} / {cell.backend}: {placed['achieved_gbps']:.1f} GB/s exceeds the DRAM "
                         f"ceiling: {why}")
    return notes
