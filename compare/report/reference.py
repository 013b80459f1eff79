"""``python -m compare reference RUN_DIR...``: how steady the eager reference was.

For every cell, the eager median it timed beside its backend against the workload's
eager-only median, one column per run, and the largest and median deviation per run.
``--positions`` splits each cell's alternated samples by what ran just before them
(the same callable, or the other one): a neighbour effect shows as a gap between the
two. Reads results only; measures nothing.
"""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pandas as pd

from compare.results.derived import fill_derived, reference_spread
from compare.results.schema import Cell, RunResults


def position_split(samples: list[float], first: bool) -> tuple[float | None, float | None]:
    """Medians of the samples taken right after the same callable and right after the
    other one. In ABBA order (A B, B A, A B, ...) A follows itself at even rounds and
    the other at odd ones; B the reverse. ``first``: the callable is A."""
    after_self = [x for i, x in enumerate(samples) if i > 0 and (i % 2 == 0) == first]
    after_other = [x for i, x in enumerate(samples) if i > 0 and (i % 2 == 1) == first]
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    return med(after_self), med(after_other)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.1f}%"


def _gap(pair: tuple[float | None, float | None]) -> float | None:
    after_self, after_other = pair
    return None if not after_self or after_other is None else after_other / after_self - 1


def deviation_frame(runs: dict[str, RunResults]) -> pd.DataFrame:
    rows: dict[tuple, dict[str, Any]] = {}
    for name, results in runs.items():
        for cell in results.cells:
            if cell.is_reference or cell.spread.reference_deviation is None:
                continue
            row = rows.setdefault((cell.label, cell.backend), {"workload": cell.label, "backend": cell.backend})
            row[name] = _pct(cell.spread.reference_deviation)
    return pd.DataFrame(list(rows.values()))


def positions_frame(runs: dict[str, RunResults]) -> pd.DataFrame:
    """Per cell and run: eager's and the backend's slowdown when the other callable ran just before."""
    rows = []
    for name, results in runs.items():
        for cell in results.cells:
            if not _alternated(cell):
                continue
            rows.append({"run": name, "workload": cell.label, "backend": cell.backend,
                         "eager after backend vs after eager": _pct(_gap(position_split(cell.eager_latency.samples, True))),
                         "backend after eager vs after backend": _pct(_gap(position_split(cell.latency.samples, False))),
                         "sample warm-up": (results.config.get("timing") or {}).get("sample_warmup", False),
                         "pairs": cell.latency.n})
    return pd.DataFrame(rows)


def _alternated(cell: Cell) -> bool:
    return (not cell.is_reference and cell.status == "ok" and cell.latency is not None
            and cell.eager_latency is not None and len(cell.latency.samples) >= 5)


def summary_frame(runs: dict[str, RunResults]) -> pd.DataFrame:
    rows = []
    for name, results in runs.items():
        spread = reference_spread(results)
        if spread is None:
            continue
        cfg = results.config
        rows.append({"run": name, "cells": spread["cells"], "largest deviation": _pct(spread["largest"]),
                     "at": spread["largest_cell"], "median deviation": _pct(spread["median"]),
                     "beyond ±5%": len(spread["beyond"]),
                     "sample warm-up": (cfg.get("timing") or {}).get("sample_warmup", False),
                     "thread spin": cfg.get("thread_spin", "default"), "processes": cfg.get("processes", 1),
                     "allocator": results.environment.get("allocator", cfg.get("allocator", "glibc-tuned"))})
    return pd.DataFrame(rows)


def load_runs(paths: list[str]) -> dict[str, RunResults]:
    runs = {}
    for path in paths:
        results = RunResults.load(path)
        fill_derived(results)
        runs[Path(path).name or path] = results
    return runs


def run(args, console) -> int:
    runs = load_runs(args.runs)
    parts = [("Eager reference per run", summary_frame(runs)),
             ("In-cell eager median vs the eager-only median, per cell", deviation_frame(runs))]
    if args.positions:
        parts.append(("Position effect: alternated samples split by what ran just before", positions_frame(runs)))
    for title, frame in parts:
        console.print(f"\n[bold]{title}[/bold]")
        console.print(frame.to_markdown(index=False) if len(frame) else "(no alternated cells)", highlight=False)
    return 0
