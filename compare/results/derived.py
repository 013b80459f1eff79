"""Figures derived from measured ones (never new measurements): speedups and their
intervals, break-even calls, the eager reference's drift, amortization curves and
roofline placement. Filled in by the runner before every save, and again by
``compare report``, so results.json always carries them."""
from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np

from compare.measure.roofline import place
from compare.measure.stats import (
    INTERVAL_TAIL,
    NOISY_REL_IQR,
    block_rounds,
    break_even_calls,
    interval_and_break_even,
    paired_bootstrap_medians,
    process_speedups,
    speedup_and_break_even,
    stretch_resample_medians,
)
from compare.results import extensions
from compare.results.roles import REFERENCE_BACKEND
from compare.results.schema import Cell, RunResults

AMORTIZATION_CALLS = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000]
# An in-cell eager median further than this from the eager-only cell's is flagged.
REFERENCE_TOLERANCE = 0.05
# A speedup is flagged noisy when its interval's half-width exceeds this share of it.
NOISY_REL_HALF_WIDTH = 0.05
# A cell whose own tool's median is further than this from dlcompare's is flagged.
CROSSCHECK_TOLERANCE = 0.15


def amortization_curve(compile_s: float, latency_ms: float, eager_ms: float) -> list[dict[str, float]]:
    """Cumulative seconds after n calls: compile + n x latency against n x eager latency."""
    return [{"calls": n, "compiled_s": compile_s + n * latency_ms / 1e3, "eager_s": n * eager_ms / 1e3}
            for n in AMORTIZATION_CALLS]


def paid_seconds(cell: Cell) -> tuple[float | None, float | None]:
    """(everything paid, this run's compile without tuning). For a tuned backend the
    first adds every second of tuning behind its log, whether that tuning ran in this run
    or an earlier one; None when the log's tuning time was never recorded."""
    if cell.compile_s is None:
        return None, None
    tune_now = (cell.costs.compile_phases or {}).get("tune", 0.0)
    excluding = cell.compile_s - tune_now
    if "tune" not in (cell.costs.compile_phases or {}):
        return cell.compile_s, None
    return (None if cell.costs.tuning_s is None else excluding + cell.costs.tuning_s), excluding


IN_CELL = "in-cell eager, alternated with the backend in its worker"
EAGER_ONLY = "eager-only processes timed in turns with this cell, stretch by stretch"
# Which eager a speedup is divided by, where the run timed eager-only processes in the cell's
# stretches: "guarded" (the in-cell eager, unless in every stretch it sat beyond
# REFERENCE_TOLERANCE from the eager-only processes on the same side: then those; see
# ``in_cell_check``), "eager-only" or "in-cell".
# A module setting for experiments (scripts/experiments/estimators_back_to_back.py).
PAIRING = "guarded"


def median_round_s(cell: Cell) -> float | None:
    rounds_s = [float(p["round_s"]) for p in (cell.spread.processes or []) if p.get("round_s")]
    return statistics.median(rounds_s) if rounds_s else None


def interval_plan(cell: Cell, correlation_s: float | None) -> dict:
    """How the speedup's interval resamples this cell: its processes, then blocks of
    consecutive rounds that last at least the machine's correlation time."""
    groups = cell.spread.process_samples or ([cell.latency.n] if cell.latency else [])
    block = min(block_rounds(correlation_s, median_round_s(cell)), min(groups, default=1))
    return {"method": "hierarchical bootstrap: processes, then blocks of rounds; percentile",
            "reference": IN_CELL,
            "processes": len(groups), "block_rounds": block, "correlation_s": correlation_s,
            "tail": INTERVAL_TAIL}


def interval_block(cell: Cell) -> int:
    """Rounds per bootstrap block for this cell's other intervals: its speedup's plan, else 1
    (eager's own cell has no plan)."""
    return cell.spread.interval.get("block_rounds", 1) if cell.spread.interval else 1


def stretch_samples(cell: Cell, latency=None) -> dict[str, list[list[float]]] | None:
    """The cell's latency samples (or ``latency``'s: its in-cell eager's) by stretch of
    interleaved time, one list per process; None where a process sampled in no recorded
    stretch (a run that did not interleave)."""
    latency = latency or cell.latency
    processes, groups = cell.spread.processes or [], cell.spread.process_samples or []
    if latency is None or not groups or len(processes) != len(groups) or sum(groups) != latency.n:
        return None
    if any("stretch" not in p for p in processes):
        return None
    out: dict[str, list[list[float]]] = {}
    offset = 0
    for process, count in zip(processes, groups):
        out.setdefault(str(process["stretch"]), []).append(latency.samples[offset:offset + count])
        offset += count
    return out


def stretch_ratio(reference: Cell, ref_by, cand: Cell, cand_by, correlation_s: float | None):
    """median(reference) / median(cand) over ``cand_by``'s stretches, and its resampled
    numerators and denominators (``stretch_resample_medians``)."""
    ref_by = {s: ref_by[s] for s in cand_by}
    ref_ms = statistics.median([x for lists in ref_by.values() for part in lists for x in part])
    cand_ms = statistics.median([x for lists in cand_by.values() for part in lists for x in part])
    shortest = min(len(part) for lists in (*ref_by.values(), *cand_by.values()) for part in lists)
    blocks = [min(block_rounds(correlation_s, median_round_s(c)), shortest) for c in (reference, cand)]
    ra, rb = stretch_resample_medians(ref_by, cand_by, blocks[0], blocks[1])
    return ref_ms, cand_ms, ra, rb, blocks


def stretch_ratios(num_by: dict[str, list[list[float]]], den_by: dict[str, list[list[float]]]) -> list[float]:
    """Each of ``num_by``'s stretches' own median over ``den_by``'s, in stretch order."""
    def median(lists: list[list[float]]) -> float:
        return statistics.median([x for part in lists for x in part])
    return [median(num_by[s]) / median(den_by[s]) for s in sorted(num_by)]


def eager_only_stretches(cell: Cell, reference: Cell | None):
    """(the eager-only reference's samples by stretch, the cell's) where every stretch of the
    cell had eager-only processes; None where the run did not time them so."""
    if reference is None or reference.status != "ok" or reference.latency is None:
        return None
    ref_by, cand_by = stretch_samples(reference), stretch_samples(cell)
    if not ref_by or not cand_by or not set(cand_by) <= set(ref_by):
        return None
    return ref_by, cand_by


def in_cell_check(cell: Cell, reference: Cell | None, correlation_s: float | None) -> dict[str, Any] | None:
    """How far the eager timed in this cell's worker sat from the eager-only processes of
    the same stretches: the ratio of their medians with its 95 % interval (resampled as a
    speedup is), and each stretch's own ratio. ``moved``: in two stretches or more, every
    stretch's in-cell eager sat beyond REFERENCE_TOLERANCE on the same side (a spinning pool
    slows every one; one eager-only process's own offset of ±10 % moves one stretch). None
    where the run did not time them in the same stretches."""
    found = eager_only_stretches(cell, reference)
    in_cell = stretch_samples(cell, cell.eager_latency) if cell.eager_latency is not None else None
    if found is None or not in_cell or reference is None:
        return None
    ref_by = found[0]
    ref_ms, eager_ms, ra, rb, _ = stretch_ratio(reference, ref_by, cell, in_cell, correlation_s)
    per_stretch = stretch_ratios(in_cell, ref_by)
    moved = len(per_stretch) > 1 and (all(r > 1 + REFERENCE_TOLERANCE for r in per_stretch)
                                      or all(r < 1 - REFERENCE_TOLERANCE for r in per_stretch))
    return {"ratio": eager_ms / ref_ms, "ci": interval_and_break_even(rb, ra, None)[0],  # in-cell / eager-only
            "per_stretch": per_stretch, "stretches": len(in_cell), "moved": moved}


def eager_only_pairing(cell: Cell, reference: Cell | None, correlation_s: float | None):
    """The speedup against the workload's eager-only processes timed in the same stretches
    of time as this cell's, where the run interleaved them: (resampled ref medians, resampled
    cell medians, per-stretch speedups, plan); None where it cannot be made (no such
    reference, or a stretch of this cell without one).

    Eager timed in a backend's own worker shares that process with the backend: whatever
    the backend leaves running after its call (a pool that keeps spinning) slows it, and
    inflates the speedup it is divided by. The eager-only processes share no process with
    any backend, and in an interleaved run they took turns with this cell in every stretch,
    so the machine's drift is in both."""
    found = eager_only_stretches(cell, reference)
    if found is None or reference is None:
        return None
    ref_by, cand_by = found
    ref_ms, cand_ms, ra, rb, blocks = stretch_ratio(reference, ref_by, cell, cand_by, correlation_s)
    if not cand_ms > 0:
        return None
    per_stretch = [1 / r for r in stretch_ratios(cand_by, ref_by)]
    plan = {"method": "bootstrap: stretches of interleaved time (both sides' processes of a stretch together), "
                      "then blocks of rounds within each process; percentile",
            "reference": EAGER_ONLY,
            "reference_ms": ref_ms, "stretches": len(cand_by), "processes": len(cell.spread.process_samples or []),
            "reference_processes": sum(len(ref_by[s]) for s in cand_by),
            "block_rounds": blocks[1], "reference_block_rounds": blocks[0], "correlation_s": correlation_s,
            "tail": INTERVAL_TAIL}
    if cell.eager_latency is not None and cell.eager_latency.median:
        plan["in_cell_speedup"] = cell.eager_latency.median / cand_ms
    return ra, rb, per_stretch, plan


def make_interval(cell: Cell, correlation_s: float | None, reference: Cell | None, paid: float | None) -> None:
    """Choose the cell's eager (see ``fill_speedup``) and make its speedup's interval, the
    break-even's, and the plan that says how (``spread.interval``)."""
    check = in_cell_check(cell, reference, correlation_s) if PAIRING == "guarded" else None
    use_eager_only = PAIRING == "eager-only" or bool(check and check["moved"])
    paired = eager_only_pairing(cell, reference, correlation_s) if use_eager_only else None
    if paired is not None:
        ra, rb, per_stretch, plan = paired
        cell.speedup_ci, cell.costs.break_even_ci = interval_and_break_even(ra, rb, paid)
        cell.spread.speedup_processes = per_stretch if len(per_stretch) > 1 else None
    else:
        assert cell.eager_latency is not None and cell.latency is not None  # fill_speedup's precondition
        plan = interval_plan(cell, correlation_s)
        cell.speedup_ci, cell.costs.break_even_ci = speedup_and_break_even(
            cell.eager_latency, cell.latency, paid, cell.spread.process_samples, plan["block_rounds"])
    cell.spread.interval = {**plan, **({"in_cell_check": check} if check is not None else {})}


def divided_by_ms(cell: Cell) -> float:
    """The eager median the cell's speedup divides: the eager-only processes' where its
    interval was made against them, else its in-cell eager's."""
    plan = cell.spread.interval or {}
    assert cell.eager_latency is not None  # a cell with a speedup
    return plan["reference_ms"] if plan.get("reference") == EAGER_ONLY else cell.eager_latency.median


def fill_speedup(cell: Cell, correlation_s: float | None = None, reference: Cell | None = None) -> None:
    """The cell's speedup over eager, its interval and its break-even. Against the eager
    alternated with it in its worker (pairs from the same rounds: the most precise), unless
    that eager sat beyond noise from the eager-only processes of the same stretches
    (``in_cell_check``): then the backend's worker moved its own reference, and the speedup is
    against the eager-only processes (``eager_only_pairing``), which share no process with
    any backend. The bootstraps run once, for a cell whose interval is not yet made."""
    ref, stats = cell.eager_latency, cell.latency
    if ref is None or stats is None or not stats.median or not math.isfinite(stats.median / ref.median):
        return  # no ratio to draw from a latency that is zero or not a number
    groups = cell.spread.process_samples
    if cell.is_reference:
        cell.speedup = ref.median / stats.median
        cell.noisy = any(s.rel_iqr > NOISY_REL_IQR for s in (ref, stats))
        cell.speedup_ci, cell.costs.break_even_note = None, "reference"
        return
    paid, excluding = paid_seconds(cell)
    if cell.speedup_ci is None:
        make_interval(cell, correlation_s, reference, paid)
    eager_ms = divided_by_ms(cell)
    cell.speedup = eager_ms / stats.median
    if (cell.spread.interval or {}).get("reference") != EAGER_ONLY:
        cell.spread.speedup_processes = process_speedups(ref, stats, groups) if groups and len(groups) > 1 else None
    assert cell.speedup_ci is not None  # made above
    # Noisy on the interval's width: what the next run may read, not one process's IQR.
    cell.noisy = (cell.speedup_ci[1] - cell.speedup_ci[0]) / 2 > NOISY_REL_HALF_WIDTH * cell.speedup
    cell.costs.break_even_calls = break_even_calls(paid, eager_ms, stats.median)
    cell.costs.break_even_calls_excl_tuning = break_even_calls(excluding, eager_ms, stats.median)
    if cell.speedup_ci[0] <= 1.0:
        # Not faster beyond noise: no finite call count can be promised.
        cell.costs.break_even_calls = None
        cell.costs.break_even_note = "never: not faster than eager beyond noise"
    elif paid is None:
        cell.costs.break_even_note = "unknown: the tuning time behind this log was not recorded"
    else:
        cell.costs.break_even_note = None


def rate_figure(rates: list[float]) -> dict[str, float | int | None]:
    """The median over generations, the statistic of the rate's ratio to eager (``rate_speedup``)
    that the tables show beside it; and the mean ± standard deviation that llama-bench reports
    over repetitions, kept for comparison with it (results.csv)."""
    return {"median": statistics.median(rates) if rates else None, "mean": statistics.fmean(rates) if rates else None,
            "sd": statistics.stdev(rates) if len(rates) > 1 else None, "n": len(rates)}


def rate_speedup(rates: list[float], eager_rates: list[float], groups: list[int] | None) -> dict[str, Any] | None:
    """The backend's median rate over eager's, with its 95 % interval: generations of a
    round are paired (they ran back to back) and resampled together, as the cell's speedup."""
    if not rates or len(rates) != len(eager_rates) or not min(eager_rates) > 0:
        return None
    groups = groups if groups and sum(groups) == len(rates) else None
    ref, cand = paired_bootstrap_medians(eager_rates, rates, groups)
    ratios = cand / ref
    return {"value": statistics.median(rates) / statistics.median(eager_rates),
            "ci": [float(np.quantile(ratios, INTERVAL_TAIL)), float(np.quantile(ratios, 1 - INTERVAL_TAIL))]}


def fill_speedup_vs_fp32(cell: Cell) -> None:
    """An int8 cell against fp32 eager timed in the same rounds: the speedup, its interval
    (resampled as the speedup's), and the calls after which compile and quantization are
    paid back (what a user who would otherwise run fp32 eager waits for)."""
    ref, stats = cell.int8.fp32_eager_latency, cell.latency
    if ref is None or stats is None or not stats.median:
        return
    cell.int8.speedup_vs_fp32 = ref.median / stats.median
    paid = paid_seconds(cell)[0]
    if cell.int8.speedup_vs_fp32_ci is None:  # eager's own cell has no interval plan: blocks of one round
        block = interval_block(cell)
        cell.int8.speedup_vs_fp32_ci, _ = speedup_and_break_even(ref, stats, paid, cell.spread.process_samples, block)
    faster = cell.int8.speedup_vs_fp32_ci[0] > 1.0 if cell.int8.speedup_vs_fp32_ci else cell.int8.speedup_vs_fp32 > 1.0
    cell.int8.break_even_vs_fp32_calls = break_even_calls(paid, ref.median, stats.median) if faster else None


def correlation_seconds(results: RunResults) -> float | None:
    """The machine's correlation time from the noise probe taken before the cells (the
    intervals are made as cells end, so the probe after them cannot count)."""
    before = (results.experiments.get("noise_probe") or {}).get("before")
    return before.get("correlation_s") if isinstance(before, dict) else None


def fill_derived(results: RunResults) -> None:
    # A weight-only eager cell's latency is torchao's, not fp32 eager's: its in-cell fp32 eager is.
    eager_only = {c.label: (c.latency if c.is_reference else c.eager_latency).median for c in results.cells
                  if c.backend == results.config.get("reference", REFERENCE_BACKEND) and c.status == "ok"
                  and c.latency and c.eager_latency}
    references = {c.label: c for c in results.cells if c.is_reference}
    ceilings = results.experiments.get("roofline_ceilings")
    correlation_s = correlation_seconds(results)
    for cell in results.cells:
        if cell.status != "ok" or cell.latency is None:
            continue
        fill_speedup(cell, correlation_s, references.get(cell.label))
        for fill_scenario_figures in extensions.cell_figures():
            fill_scenario_figures(cell, results.config)
        fill_speedup_vs_fp32(cell)
        cell.spread.eager_only_ms = eager_only.get(cell.label)
        if cell.spread.eager_only_ms and cell.eager_median_ms:
            cell.spread.reference_deviation = cell.eager_median_ms / cell.spread.eager_only_ms - 1
        if not cell.is_reference and cell.compile_s is not None and cell.eager_median_ms:
            paid = paid_seconds(cell)[0]
            cell.costs.amortization = amortization_curve(paid if paid is not None else cell.compile_s,
                                                   cell.latency.median, divided_by_ms(cell))
        if ceilings and cell.instruments.work:
            cell.instruments.roofline = place(cell.instruments.work, cell.latency.median, ceilings)
        if cell.instruments.crosscheck and "ratio" in cell.instruments.crosscheck:
            cell.instruments.crosscheck["flagged"] = abs(cell.instruments.crosscheck["ratio"] - 1) > CROSSCHECK_TOLERANCE


def reference_spread(results: RunResults) -> dict | None:
    """How far each in-cell eager median sits from its workload's eager-only median:
    the largest deviation, the median deviation and the cells beyond the tolerance."""
    devs = [(c.spread.reference_deviation, c) for c in results.cells
            if not c.is_reference and c.spread.reference_deviation is not None]
    if not devs:
        return None
    import statistics

    worst, cell = max(devs, key=lambda d: abs(d[0]))
    return {"largest": worst, "largest_cell": f"{cell.label} / {cell.backend}",
            "median": statistics.median(d for d, _ in devs), "cells": len(devs),
            "beyond": [f"{c.label} / {c.backend} ({d * 100:+.1f}%)" for d, c in devs if abs(d) > REFERENCE_TOLERANCE]}
