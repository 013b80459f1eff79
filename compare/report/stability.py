"""``python -m compare stability A B``: are the intervals of a run calibrated? For two runs
of the same plan, the share of cells whose speedup lies inside the other run's 95 %
interval (both ways), the share whose intervals overlap, and the intervals' median
half-width. A calibrated 95 % interval puts about 83 % of a second estimate inside the
first one's interval (two independent estimates differ by sqrt(2) standard errors, and
P(|Z| < 1.96 / sqrt(2)) = 0.83), and two such intervals overlap about 99 % of the time.
Read-only: it compares recorded results and measures nothing.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from compare.results.derived import fill_derived
from compare.results.schema import Cell, RunResults, atomic_write_text

CALIBRATED_INSIDE = 2 * 0.5 * (1 + math.erf(1.96 / math.sqrt(2) / math.sqrt(2))) - 1  # 0.834
CALIBRATED_OVERLAP = 2 * 0.5 * (1 + math.erf(1.96 * 2 / math.sqrt(2) / math.sqrt(2))) - 1  # 0.994


@dataclass(frozen=True)
class Pair:
    """One cell in both runs."""
    label: str
    backend: str
    a: float
    a_ci: tuple[float, float]
    b: float
    b_ci: tuple[float, float]

    @property
    def b_in_a(self) -> bool:
        return self.a_ci[0] <= self.b <= self.a_ci[1]

    @property
    def a_in_b(self) -> bool:
        return self.b_ci[0] <= self.a <= self.b_ci[1]

    @property
    def overlap(self) -> bool:
        return self.a_ci[0] <= self.b_ci[1] and self.b_ci[0] <= self.a_ci[1]

    @property
    def change(self) -> float:
        return self.b / self.a - 1


def _half_width(value: float, ci: tuple[float, float]) -> float:
    return (ci[1] - ci[0]) / 2 / value


def _usable(cell: Cell) -> bool:
    return (cell.status == "ok" and not cell.is_reference and cell.speedup is not None
            and cell.speedup_ci is not None and cell.numerics.numerics_ok is not False)


def speedup_figure(cell: Cell) -> tuple[float, list[float]] | None:
    usable = _usable(cell) and cell.speedup is not None and cell.speedup_ci is not None
    return (cell.speedup, cell.speedup_ci) if usable else None


def tail_figure(cell: Cell) -> tuple[float, list[float]] | None:
    """Single-stream: eager's p99 request over the backend's, and its interval."""
    tail = cell.scenario.tail_speedup
    return (tail["ratio"], tail["ci"]) if tail and _usable(cell) else None


def rate_figure(part: str):
    """The decode suite: ``part``'s (``pp``, prefill; ``tg``, generation) tokens/s over eager's, and its interval."""
    def figure(cell: Cell) -> tuple[float, list[float]] | None:
        found = (cell.scenario.decode or {}).get(f"{part}_speedup") if _usable(cell) else None
        return (found["value"], found["ci"]) if found and found.get("ci") else None
    return figure


def pairs(a: RunResults, b: RunResults, figure=speedup_figure) -> list[Pair]:
    """The ok cells with ``figure`` (a value and its interval) in both runs, in A's order."""
    fill_derived(a)
    fill_derived(b)
    return matched(a, b, figure)


def matched(a: RunResults, b: RunResults, figure) -> list[Pair]:
    """``pairs`` of runs whose derived fields are filled already."""
    others = {c.key: found for c in b.cells if (found := figure(c))}
    out = []
    for cell in a.cells:
        mine, other = figure(cell), others.get(cell.key)
        if mine and other:
            out.append(Pair(cell.label, cell.backend, mine[0], tuple(mine[1]), other[0], tuple(other[1])))
    return out


def calibration(found: list[Pair]) -> dict[str, float | int]:
    """The calibration figures over ``found`` (empty: zeros)."""
    if not found:
        return {"cells": 0, "b_in_a": 0.0, "a_in_b": 0.0, "inside": 0.0, "overlap": 0.0,
                "median_half_width": 0.0, "median_abs_change": 0.0}
    n = len(found)
    widths = [_half_width(p.a, p.a_ci) for p in found] + [_half_width(p.b, p.b_ci) for p in found]
    return {"cells": n,
            "b_in_a": sum(p.b_in_a for p in found) / n,
            "a_in_b": sum(p.a_in_b for p in found) / n,
            "inside": sum(p.b_in_a + p.a_in_b for p in found) / (2 * n),
            "overlap": sum(p.overlap for p in found) / n,
            "median_half_width": statistics.median(widths),
            "median_abs_change": statistics.median(abs(p.change) for p in found)}


def _ci(value: float, ci: tuple[float, float]) -> str:
    return f"{value:.2f}x [{ci[0]:.2f}-{ci[1]:.2f}]"


def _table(found: list[Pair], what: str) -> list[str]:
    import pandas as pd

    rows = [{"workload": p.label, "backend": p.backend, "A": _ci(p.a, p.a_ci), "B": _ci(p.b, p.b_ci),
             "change": f"{p.change * 100:+.1f}%", "B in A's CI": "yes" if p.b_in_a else "no",
             "A in B's CI": "yes" if p.a_in_b else "no", "overlap": "yes" if p.overlap else "no"} for p in found]
    return [pd.DataFrame(rows).to_markdown(index=False) if rows else f"(no cell has a {what} interval in both runs)",
            "", summary_line(calibration(found), what)]


def markdown(a: RunResults, b: RunResults, found: list[Pair]) -> str:
    lines = [f"# Stability of {a.run_id} (A) and {b.run_id} (B)", "", *_table(found, "speedup")]
    tails = matched(a, b, tail_figure)  # found came from pairs, which filled both runs
    if tails:  # single-stream runs: the tail's promise too
        lines += ["", "## p99 speedup (eager's p99 request over the backend's)", "", *_table(tails, "p99 speedup")]
    for part, what in (("pp", "prefill"), ("tg", "generation")):
        rates = matched(a, b, rate_figure(part))
        if rates:  # decode runs: each rate's promise (llama-bench's pp and tg)
            lines += ["", f"## {part} tokens/s over eager's ({what})", "", *_table(rates, f"{part} speedup")]
    return "\n".join(lines) + "\n"


def summary_line(figures: dict, what: str = "speedup") -> str:
    return (f"{figures['cells']} cells: {figures['inside']:.0%} of {what}s inside the other run's 95% interval "
            f"(B in A {figures['b_in_a']:.0%}, A in B {figures['a_in_b']:.0%}; calibrated: about "
            f"{CALIBRATED_INSIDE:.0%}); intervals overlap on {figures['overlap']:.0%} (calibrated: about "
            f"{CALIBRATED_OVERLAP:.0%}); median half-width {figures['median_half_width']:.1%}; median change "
            f"{figures['median_abs_change']:.1%}.")


def run(args, console) -> int:
    a, b = RunResults.load(args.base), RunResults.load(args.new)
    found = pairs(a, b)
    text = markdown(a, b, found)
    if args.output:
        atomic_write_text(Path(args.output), text)
    console.print(text, highlight=False, markup=False)
    return 0
