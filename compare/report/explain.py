"""``python -m compare explain RUN_DIR``: where each backend's time goes.

Reads the kernel profiles that ``--explain`` recorded (each backend's own profiler,
run after timing): per cell, the kernels one call runs, their share of the call by
category, the longest ones, and the kernel count against eager's op count, so that
fusion shows as a number. Reads results only; measures nothing.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from adapters.profiling import CATEGORIES
from compare.results.schema import Cell, RunResults


def _profiled(cell: Cell) -> bool:
    return cell.status == "ok" and bool(cell.instruments.profile) and "kernels" in cell.instruments.profile


OUTSIDE = "outside kernels"  # the profiled call's time that no kernel accounts for (dispatch, VM, Python)


def _call_ms(profile: dict[str, Any]) -> float:
    """The profiled call, or the kernels' sum where they ran concurrently and exceed it."""
    return max(profile["profiled_call_ms"], sum(k["ms"] for k in profile["kernels"]))


def category_shares(profile: dict[str, Any]) -> dict[str, float]:
    """Share of the profiled call per category, and the share outside every kernel: the
    shares sum to 1. Where the kernels' times add up to more than the call (kernels that
    ran concurrently), they are shares of the kernels' sum and nothing is outside."""
    kernel_ms = sum(k["ms"] for k in profile["kernels"])
    total = _call_ms(profile) or 1.0
    shares = dict.fromkeys(CATEGORIES, 0.0)
    for k in profile["kernels"]:
        shares[k["category"]] += k["ms"] / total
    shares[OUTSIDE] = max(0.0, 1.0 - kernel_ms / total)
    return shares


def launches(profile: dict[str, Any]) -> float:
    return sum(k["calls"] for k in profile["kernels"])


def _top(profile: dict[str, Any], count: int = 3) -> str:
    total = _call_ms(profile) or 1.0
    return "; ".join(f"{k['name'][:48]} {k['ms'] / total:.0%}" for k in profile["kernels"][:count])


def explain_frame(results: RunResults) -> pd.DataFrame:
    """One row per cell: kernels per call against eager's ops, shares, longest kernels."""
    eager_ops = {c.label: launches(c.instruments.profile) for c in results.cells if c.is_reference and _profiled(c)}
    rows = []
    for cell in results.cells:
        if cell.status != "ok" or cell.instruments.profile is None:
            continue
        row: dict[str, Any] = {"workload": cell.label, "backend": cell.backend}
        if not _profiled(cell):
            row["note"] = cell.instruments.profile.get("unavailable", "no profile")
            rows.append(row)
            continue
        p = cell.instruments.profile
        row.update({"kernels per call": round(launches(p), 1), "eager ops per call": eager_ops.get(cell.label),
                    "distinct kernels": len(p["kernels"])})
        row.update({k: f"{v:.0%}" for k, v in category_shares(p).items()})
        row["profiled / timed call"] = f"{p['profiled_call_ms']:.3g} / {p['timed_median_ms']:.3g} ms"
        share = (p.get("facts") or {}).get("launch_bound_share")  # CUDA: the GPU idle share of the call
        if share is not None:
            row["launch-bound share"] = f"{share:.0%}"
        row["longest kernels"] = _top(p)
        row["note"] = p.get("note") or ""
        rows.append(row)
    return pd.DataFrame(rows)


def category_ms(profile: dict[str, Any]) -> dict[str, float]:
    """Milliseconds of the profiled call by category, and outside every kernel."""
    total = _call_ms(profile)
    return {category: share * total for category, share in category_shares(profile).items()}


def backend_notes(results: RunResults) -> list[str]:
    """What a backend's profile says of its compiler beyond the kernels (``facts``, e.g.
    Inductor's realization rule), once per backend."""
    notes: dict[str, str] = {}
    for cell in results.cells:
        facts = (cell.instruments.profile or {}).get("facts") or {}
        if "realization" in facts:
            notes.setdefault(cell.backend, facts["realization"])
    return [f"- {backend}: {text}." for backend, text in notes.items()]


def explain_markdown(results: RunResults) -> list[str]:
    """summary.md's section, when the run was made with --explain."""
    frame = explain_frame(results)
    if frame.empty:
        return []
    notes = backend_notes(results)
    return ["", "## Where the time goes", "",
            "Each backend's own profiler, run after timing in the same worker: kernels per call against eager's "
            "ops (fusion shows as fewer), the share of the profiled call by kernel category and outside every "
            "kernel, and the profiled call beside the timed median (the profiler's own cost).", "",
            frame.fillna("-").to_markdown(index=False), *(["", *notes] if notes else [])]


def run(args, console) -> int:
    results = RunResults.load(args.run)
    frame = explain_frame(results)
    if frame.empty:
        console.print(f"{args.run}: no kernel profiles in this run; run it with --explain")
        return 1
    console.print(f"[bold]Where the time goes[/bold] (run {results.run_id}; each backend's own profiler, "
                  "after timing; shares of the profiled call)")
    console.print(frame.fillna("-").to_markdown(index=False), highlight=False)
    for note in backend_notes(results):
        console.print(note, highlight=False)
    return 0
