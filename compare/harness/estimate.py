"""How long a planned run will take, said before it starts.

The basis is what the same cells took before on this machine: the wall seconds of each
cell (spawn to exit, over its processes) kept in the history database. A cell never run
here is counted at the median of the cells that were, and where none was, at the floor
its timing budget sets (compile time unknown): the line says which.
"""
from __future__ import annotations

import sqlite3
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from compare.results.schema import variant_label

CellKey = tuple[str, str, str, str]  # (label, backend, size, device)


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


def past_wall_s(db: Path, cpu_model: str, threads: int) -> dict[CellKey, float]:
    """The latest wall time of each cell that finished ok in a run on this CPU and thread count."""
    if not db.is_file():
        return {}
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            rows = con.execute(
                "SELECT c.workload, c.backend, c.size, c.device, c.wall_s FROM cells c JOIN runs r USING (run_id) "
                "WHERE r.cpu_model = ? AND r.threads = ? AND c.status = 'ok' AND c.wall_s > 0 ORDER BY r.started",
                (cpu_model, threads)).fetchall()
        finally:
            con.close()
    except sqlite3.Error:  # an old database without wall times, or a locked one: no basis
        return {}
    return {(w, b, s, d): wall for w, b, s, d, wall in rows}


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
