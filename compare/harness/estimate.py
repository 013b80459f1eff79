"""How long a planned run will take, said before it starts.

The basis is what the same cells took before on this machine: the wall seconds of each
cell (spawn to exit, over its processes) kept in the history database. A cell never run
here is counted at what it took in the reference run shipped with dlcompare
(``reference_walls.json``, made by ``scripts/reference_walls.py`` from a dated run in
docs/results/, on the machine it names), else at the median of the cells that were, and
where none was, at the floor its timing budget sets (compile time unknown): the line says
which.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from compare.results.history import CellKey, past_wall_s
from compare.results.schema import variant_label

__all__ = ["Estimate", "ReferenceWalls", "estimate", "past_wall_s", "reference_walls"]

REFERENCE_FILE = Path(__file__).with_name("reference_walls.json")
# What each process after a cell's first adds to its run's time, as a share of a
# one-process cell's. Measured on the zoo's default eight compilers (bert_base twice,
# efficientnet once, 3 interleaved processes): each later pass took 0.46-0.51 of the
# workload's one-process wall. A later process starts, builds the model and loads the first
# one's artifact, but Inductor (freezing packs weights into mkldnn tensors, which its FX
# cache cannot pickle), XLA (7 s of conversion, 11 s to load a cache hit) and untuned TVM
# (no store) compile again (docs/results/2026-12-07-zen4-zoo-where-the-time-goes-95c3bee.md).
# Four cheap-to-load compilers (ORT, OpenVINO, AOTInductor, ExecuTorch) took 0.23: the
# estimate is then high, never low.
LATER_PROCESS_SHARE = 0.49


@dataclass(frozen=True)
class ReferenceWalls:
    """Each cell's wall seconds in one dated run (any status: a timeout costs its limit)."""
    source: str  # the docs/results page of the run
    machine: str  # its CPU and thread count, as the line states them
    threads: int  # a run at another thread count takes other times: not a basis
    walls: dict[CellKey, float] = field(default_factory=dict)
    processes: int = 1  # worker processes per cell in that run

    @classmethod
    def from_dict(cls, data: dict) -> "ReferenceWalls":
        walls = {tuple(key.split("|")): float(wall) for key, wall in data["cells"].items()}
        return cls(source=data["source"], machine=data["machine"], threads=int(data["threads"]),
                   walls=walls, processes=int(data.get("processes", 1)))  # type: ignore[arg-type]


def reference_walls(path: Path = REFERENCE_FILE) -> ReferenceWalls | None:
    """The shipped reference run's wall times, or None when there is none (or it is unreadable)."""
    try:
        return ReferenceWalls.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True)
class Estimate:
    cells: int
    seconds: float
    seen: int  # cells with a past wall time on this CPU and thread count
    unseen_each_s: float  # what each cell with no basis was counted at
    floor_only: bool  # True: no basis at all, the figure is the timing budgets alone
    from_reference: int = 0  # cells counted at the reference run's wall time
    reference: str = ""  # that run's machine and page
    scale: float = 1.0  # this run's processes per cell over the reference run's

    def line(self) -> str:
        total = _duration(self.seconds)
        if self.floor_only and not self.seconds:  # untimed cells (--coverage-only) never run here
            return f"estimate: none for {self.cells} cells (no earlier run of them on this CPU says what compiling takes)"
        if self.floor_only:
            return (f"estimate: at least {total} for {self.cells} cells (their timing budgets; no earlier run of "
                    "them on this CPU says what compiling takes)")
        parts = [f"{self.seen} as long as they took in earlier runs on this CPU"] if self.seen else []
        if self.from_reference:
            scaled = f" x {self.scale:.2f} for this run's processes per cell" if self.scale != 1 else ""
            parts.append(f"{self.from_reference} as long as in the reference run ({self.reference}){scaled}")
        rest = self.cells - self.seen - self.from_reference
        if rest:
            parts.append(f"{rest} never run here, counted at their median {self.unseen_each_s:.0f} s")
        return f"estimate: {total} for {self.cells} cells ({'; '.join(parts)})"


def estimate(plan: Iterable[tuple[str, str, int | None, str]], size: str, device: str, past: dict[CellKey, float],
             floor_s: float, reference: ReferenceWalls | None = None, threads: int | None = None,
             processes: int = 1) -> Estimate:
    """``plan``: the (workload, backend, batch, dtype) cells still to run; ``floor_s``: the
    least one cell can take (its processes times its timing budget); ``reference``: the
    shipped run's wall times, for the cells this machine never ran at its ``threads``,
    scaled to this run's ``processes`` per cell (``LATER_PROCESS_SHARE``)."""
    keys = [(variant_label(w, batch, dtype), b, size, device) for w, b, batch, dtype in plan]
    known = [past[k] for k in keys if k in past]
    walls = reference.walls if reference is not None and reference.threads == threads else {}
    def share(count: int) -> float:
        return 1 + (max(count, 1) - 1) * LATER_PROCESS_SHARE
    scale = share(processes) / share(reference.processes) if walls and reference is not None else 1.0
    referenced = [walls[k] * scale for k in keys if k not in past and k in walls]
    basis = known + referenced
    each = statistics.median(basis) if basis else floor_s
    return Estimate(cells=len(keys), seconds=sum(basis) + each * (len(keys) - len(basis)), seen=len(known),
                    unseen_each_s=each, floor_only=not basis, from_reference=len(referenced),
                    reference=f"{reference.machine}: {reference.source}" if referenced and reference else "",
                    scale=scale if referenced else 1.0)


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{max(minutes, 1)} min"
