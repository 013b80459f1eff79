"""How long a planned run will take, said before it starts.

The basis is what the same cells took before on this machine: the wall seconds of each
cell (spawn to exit, over its processes) kept in the history database. A cell never run
here is counted at the median of the cells that were, and where none was, at the floor
its timing budget sets (compile time unknown): the line says which.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterable

from compare.results.history import CellKey, past_wall_s
from compare.results.schema import variant_label

__all__ = ["Estimate", "estimate", "past_wall_s"]


@dataclass(frozen=True)
class Estimate:
    cells: int
    seconds: float
    seen: int  # cells with a past wall time on this CPU and thread count
    unseen_each_s: float  # what each unseen cell was counted at
    floor_only: bool  # True: no past cell at all, the figure is the timing budgets alone

    def line(self) -> str:
        total = _duration(self.seconds)
        if self.floor_only:
            return (f"estimate: at least {total} for {self.cells} cells (their timing budgets; no earlier run of "
                    "them on this CPU says what compiling takes)")
        unseen = self.cells - self.seen
        rest = f"; {unseen} never run here, counted at their median {self.unseen_each_s:.0f} s" if unseen else ""
        return f"estimate: {total} for {self.cells} cells ({self.seen} as long as they took in earlier runs on this CPU{rest})"


def estimate(plan: Iterable[tuple[str, str, int | None, str]], size: str, device: str, past: dict[CellKey, float],
             floor_s: float) -> Estimate:
    """``plan``: the (workload, backend, batch, dtype) cells still to run; ``floor_s``: the
    least one cell can take (its processes times its timing budget)."""
    keys = [(variant_label(w, batch, dtype), b, size, device) for w, b, batch, dtype in plan]
    known = [past[k] for k in keys if k in past]
    each = statistics.median(known) if known else floor_s
    return Estimate(cells=len(keys), seconds=sum(known) + each * (len(keys) - len(known)), seen=len(known),
                    unseen_each_s=each, floor_only=not known)


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{max(minutes, 1)} min"
