"""``python -m compare diff BASE NEW``: what changed between two runs, with
verdicts that account for noise.

Each cell is judged twice. Latency: the ratio of medians new/base with a
bootstrap 95% confidence interval from both runs' timing samples. Speedup over
the in-cell eager reference: the ratio new/base of the speedups, from each run's
paired bootstrap; this one survives a machine that got faster or slower between
the runs, because eager moved with it. A verdict (*slower*/*faster*, *worse*/
*better*) needs the whole interval beyond +-min_effect, otherwise *unchanged*.
Cells are compared only when they ran under the same cache state and the same
tuning-log reuse (a warm hit against a cold compile is not a regression). Compile
time is one measurement per run (no samples), so it is called changed only
beyond a fixed tolerance. The per-backend geometric mean counts slowdowns as
they are (no clipping at 1.0).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from compare.measure.stats import bootstrap_medians, geometric_mean, paired_bootstrap_medians
from compare.results.schema import Cell, RunResults, atomic_write_text

MIN_EFFECT = 0.02  # ignore shifts under 2 % even when the interval is tight
COMPILE_TOLERANCE = 0.25  # compile time: one sample per run; call it changed beyond +-25 %
ENV_KEYS = ("cpu_model", "cores", "threads", "device", "os", "allocator")


@dataclass
class CellDiff:
    workload: str
    backend: str
    base_ms: float | None
    new_ms: float | None
    ratio: float | None
    ci: tuple[float, float] | None
    verdict: str
    compile_ratio: float | None
    compile_verdict: str
    base_err: Any
    new_err: Any
    numerics_change: str
    speedup_ratio: float | None = None  # new speedup / base speedup
    speedup_ci: tuple[float, float] | None = None
    speedup_verdict: str = "-"


def ratio_interval(base: list[float], new: list[float]) -> tuple[float, float]:
    """Bootstrap 95% interval of median(new) / median(base)."""
    ra, rb = bootstrap_medians(base, new)
    lo, hi = np.percentile(rb / ra, [2.5, 97.5])
    return float(lo), float(hi)


def latency_verdict(base: list[float], new: list[float], min_effect: float = MIN_EFFECT) -> tuple[float, tuple[float, float], str]:
    ratio = float(np.median(new) / np.median(base))
    if len(base) < 3 or len(new) < 3:
        return ratio, (ratio, ratio), "too few samples"
    lo, hi = ratio_interval(base, new)
    if lo > 1 + min_effect:
        verdict = "slower"
    elif hi < 1 - min_effect:
        verdict = "faster"
    else:
        verdict = "unchanged"
    return ratio, (lo, hi), verdict


def speedup_samples(cell: Cell, seed: int) -> np.ndarray | None:
    """Bootstrap resamples of a cell's speedup over its in-cell eager (paired rounds,
    resampled within each worker process)."""
    ref, cand = cell.eager_latency, cell.latency
    if cell.is_reference or ref is None or cand is None or len(ref.samples) != len(cand.samples) \
            or len(ref.samples) < 3:
        return None
    ra, rb = paired_bootstrap_medians(ref.samples, cand.samples, cell.spread.process_samples, seed=seed)
    return ra / rb


def speedup_verdict(base: Cell, new: Cell, min_effect: float = MIN_EFFECT):
    """(ratio, interval, verdict) of new speedup / base speedup."""
    a, b = speedup_samples(base, seed=0), speedup_samples(new, seed=1)
    if a is None or b is None or not base.speedup or not new.speedup:
        return None, None, "-"
    lo, hi = np.percentile(b / a, [2.5, 97.5])
    verdict = "better" if lo > 1 + min_effect else "worse" if hi < 1 - min_effect else "unchanged"
    return new.speedup / base.speedup, (float(lo), float(hi)), verdict


def comparability(base: Cell, new: Cell) -> str | None:
    """Why two cells' figures must not be compared, or None when they may."""
    if base.costs.cache != new.costs.cache:
        return f"not comparable: cache {base.costs.cache} -> {new.costs.cache}"
    from compare.report.text import backend_class

    origins = [backend_class(c.backend).code_origin(c.conditions.info or {}) for c in (base, new)]
    if origins[0] != origins[1]:
        return f"not comparable: {origins[0] or 'no tuning'} -> {origins[1] or 'no tuning'}"
    return None


def _numerics_change(base: Cell, new: Cell) -> str:
    was, now = base.numerics.numerics_ok, new.numerics.numerics_ok
    if was is not None and now is not None and was != now:
        return "now FAILS tolerance" if not new.numerics.numerics_ok else "now within tolerance"
    b, n = base.numerics.max_abs_err, new.numerics.max_abs_err
    if isinstance(b, float) and isinstance(n, float) and b > 0 and n > 0 and abs(math.log10(n / b)) >= 1:
        return f"max abs err {b:.2g} -> {n:.2g}"
    return "same"


def diff_cells(base: RunResults, new: RunResults, min_effect: float = MIN_EFFECT) -> list[CellDiff]:
    base_by_key = {c.key: c for c in base.cells}
    out = []
    for cell in new.cells:
        old = base_by_key.get(cell.key)
        if old is None:
            out.append(CellDiff(cell.label, cell.backend, None, None, None, None, "new cell", None, "-",
                                None, cell.numerics.max_abs_err, "-"))
            continue
        if old.status != "ok" or cell.status != "ok" or not old.latency or not cell.latency:
            out.append(CellDiff(cell.label, cell.backend, None, None, None, None,
                                f"status {old.status} -> {cell.status}", None, "-", old.numerics.max_abs_err,
                                cell.numerics.max_abs_err, "-"))
            continue
        reason = comparability(old, cell)
        if reason:
            out.append(CellDiff(cell.label, cell.backend, old.latency.median, cell.latency.median, None, None,
                                reason, None, "-", old.numerics.max_abs_err, cell.numerics.max_abs_err, _numerics_change(old, cell)))
            continue
        ratio, ci, verdict = latency_verdict(old.latency.samples, cell.latency.samples, min_effect)
        compile_ratio, compile_verdict = None, "-"
        if old.compile_s and cell.compile_s is not None and not cell.is_reference:
            compile_ratio = cell.compile_s / old.compile_s
            compile_verdict = ("slower" if compile_ratio > 1 + COMPILE_TOLERANCE
                               else "faster" if compile_ratio < 1 - COMPILE_TOLERANCE else "unchanged")
        s_ratio, s_ci, s_verdict = speedup_verdict(old, cell, min_effect)
        out.append(CellDiff(cell.label, cell.backend, old.latency.median, cell.latency.median, ratio, ci,
                            verdict, compile_ratio, compile_verdict, old.numerics.max_abs_err, cell.numerics.max_abs_err,
                            _numerics_change(old, cell), s_ratio, s_ci, s_verdict))
    new_keys = {c.key for c in new.cells}
    for old in base.cells:
        if old.key not in new_keys:
            out.append(CellDiff(old.label, old.backend, None, None, None, None, "missing in new run", None, "-",
                                old.numerics.max_abs_err, None, "-"))
    return out


def geomeans(diffs: list[CellDiff]) -> dict[str, dict[str, Any]]:
    """Per backend: geometric mean of latency ratios over every compared cell (slowdowns count)."""
    by_backend: dict[str, list[float]] = {}
    for d in diffs:
        if d.ratio:
            by_backend.setdefault(d.backend, []).append(d.ratio)
    return {b: {"geomean_ratio": geometric_mean(rs), "cells": len(rs)}
            for b, rs in by_backend.items()}


def environment_differences(base: RunResults, new: RunResults) -> list[str]:
    lines = []
    for key in ENV_KEYS:
        a, b = base.environment.get(key), new.environment.get(key)
        if a != b:
            lines.append(f"{key}: {a} -> {b}")
    va, vb = base.environment.get("versions", {}), new.environment.get("versions", {})
    for name in sorted(set(va) | set(vb)):
        if va.get(name) != vb.get(name):
            lines.append(f"{name}: {va.get(name, 'absent')} -> {vb.get(name, 'absent')}")
    return lines


def regressions(diffs: list[CellDiff], pct: float) -> list[CellDiff]:
    return [d for d in diffs if d.verdict == "slower" and d.ratio and d.ratio > 1 + pct / 100]


def diff_frame(diffs: list[CellDiff]) -> pd.DataFrame:
    rows = []
    for d in diffs:
        rows.append({
            "workload": d.workload, "backend": d.backend,
            "base ms": f"{d.base_ms:.4g}" if d.base_ms else "-",
            "new ms": f"{d.new_ms:.4g}" if d.new_ms else "-",
            "new/base [95% CI]": f"{d.ratio:.3f} [{d.ci[0]:.3f}-{d.ci[1]:.3f}]" if d.ratio and d.ci else "-",
            "latency verdict": d.verdict,
            "speedup new/base [95% CI]": (f"{d.speedup_ratio:.3f} [{d.speedup_ci[0]:.3f}-{d.speedup_ci[1]:.3f}]"
                                          if d.speedup_ratio and d.speedup_ci else "-"),
            "speedup verdict": d.speedup_verdict,
            "compile new/base": f"{d.compile_ratio:.2f} ({d.compile_verdict})" if d.compile_ratio else "-",
            "numerics": d.numerics_change,
        })
    return pd.DataFrame(rows)


def render_markdown(base: RunResults, new: RunResults, diffs: list[CellDiff]) -> str:
    env = environment_differences(base, new)
    gm = geomeans(diffs)
    lines = [f"# dlcompare diff: {base.run_id} -> {new.run_id}", ""]
    if env:
        lines += ["**The environments differ** (figures are still compared):", ""] + [f"- {e}" for e in env] + [""]
    else:
        lines += ["Same environment (CPU, cores, threads, device, OS, package versions).", ""]
    lines += [diff_frame(diffs).to_markdown(index=False), "",
              "Verdicts: bootstrap 95% CI of the ratio of medians from both runs' samples, and of the ratio of "
              "speedups over each run's in-cell eager (paired bootstrap); slower/faster and worse/better only when "
              f"the whole interval is beyond +-{MIN_EFFECT:.0%}; compile time (one sample per run) beyond "
              f"+-{COMPILE_TOLERANCE:.0%}. Cells with a different cache state or tuning-log reuse are not "
              "compared.", "",
              "## Geometric mean of latency ratios per backend (new/base, slowdowns included)", ""]
    lines += [f"- {b}: {v['geomean_ratio']:.3f} over {v['cells']} cell(s)" for b, v in gm.items()]
    return "\n".join(lines) + "\n"


def render_html(base: RunResults, new: RunResults, diffs: list[CellDiff]) -> str:
    from compare.report.html import templates

    return templates().get_template("diff.html").render(
        base_id=base.run_id, new_id=new.run_id, environment_differences=environment_differences(base, new),
        diff_table=diff_frame(diffs).to_html(index=False), geomeans=geomeans(diffs))


def run(args, console) -> int:
    from rich.table import Table

    from compare.results.derived import fill_derived

    base = RunResults.load(args.base)
    new = RunResults.load(args.new)
    for results in (base, new):
        fill_derived(results)
    diffs = diff_cells(base, new, args.min_effect / 100)
    out_dir = Path(args.output_dir) if args.output_dir else (Path(args.new) if Path(args.new).is_dir() else Path(args.new).parent)
    atomic_write_text(out_dir / "diff.md", render_markdown(base, new, diffs))
    atomic_write_text(out_dir / "diff.html", render_html(base, new, diffs))
    for line in environment_differences(base, new):
        console.print(f"[yellow]environment differs:[/yellow] {line}", highlight=False)
    frame = diff_frame(diffs)
    table = Table(title=f"{base.run_id} -> {new.run_id}")
    for col in frame.columns:
        table.add_column(col)
    styles = {"slower": "red", "faster": "green"}
    for _, row in frame.iterrows():
        table.add_row(*[str(v) for v in row], style=styles.get(row["latency verdict"], ""))
    console.print(table)
    for backend, v in geomeans(diffs).items():
        console.print(f"geomean new/base {backend}: {v['geomean_ratio']:.3f} ({v['cells']} cells)", highlight=False)
    console.print(f"written: {out_dir / 'diff.md'}, {out_dir / 'diff.html'}", highlight=False)
    if args.fail_on_regression is not None:
        bad = regressions(diffs, args.fail_on_regression)
        if bad:
            for d in bad:
                console.print(f"[red]regression:[/red] {d.workload} / {d.backend}: {d.ratio:.3f}x slower "
                              f"(CI {d.ci[0]:.3f}-{d.ci[1]:.3f})", highlight=False)
            return 1
    return 0
