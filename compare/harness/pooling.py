"""One cell from the results of K worker processes that measured it (``--processes K``).

pyperf's lesson: one process's state (where its buffers landed, how its pools were
placed) can bias every sample it takes, so repeat the measurement in fresh processes
and pool. Here the first process is the cell as a single run would give it (its
compile, memory and numerics); every process adds its alternated timing pairs, and
``process_samples`` keeps how many came from each, so the speedup's bootstrap can
resample within processes.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import shutil
import statistics
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from compare.measure.latency import LatencyStats
from compare.measure.timing import TimingConfig
from compare.results.protocol import CellMeasurement, CellSpec


def process_timing(timing: TimingConfig, count: int) -> TimingConfig:
    """One process's share of a cell's timing: the budget and the sample cap split over
    ``count`` processes, and the precision target widened by sqrt(count), so that K
    processes sample about as long as one did and their pooled median is as precise."""
    if count <= 1:
        return timing
    return dataclasses.replace(timing, budget_s=timing.budget_s / count,
                               target_rel_se=timing.target_rel_se * math.sqrt(count),
                               max_samples=max(timing.min_samples, -(-timing.max_samples // count)))


@dataclass(frozen=True)
class ProcessPlan:
    """How the K processes of one cell share its work. In a cold run the first compiles
    from nothing into a store made for the cell, and the others load what it stored
    through the backend's own warm path (a vmfb, a .pt2, an ORT model, OpenVINO's cache,
    TVM's log, Inductor's caches): K processes cost one compile and K-1 warm starts."""
    count: int
    store_root: str | None = None  # None: a warm run (the persistent store) or one process

    def spec(self, spec: CellSpec, index: int) -> CellSpec:
        out = dataclasses.replace(spec, process_index=index, timing=process_timing(spec.timing, self.count))
        if index > 0:  # the cell keeps the first process's profile, counted work and GEMM libraries
            out = dataclasses.replace(out, explain=False, count_work=False)
        if self.store_root is not None:
            out = dataclasses.replace(out, cache="warm", store_root=self.store_root, fresh_store=index == 0)
        return out


@contextlib.contextmanager
def cell_store(cache: str, count: int) -> Iterator[str | None]:
    """A fresh, empty store for the processes of one cell (or group) of a cold run,
    removed when they are done; None when there is nothing to share."""
    if cache != "cold" or count <= 1:
        yield None
        return
    root = tempfile.mkdtemp(prefix="dlcompare-store-")
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _median(stats: LatencyStats | None) -> float | None:
    return stats.median if stats is not None else None


def process_summary(run: CellMeasurement, stretch: str | None = None) -> dict[str, Any]:
    """One process's figures; ``stretch`` names the interleaved stretch of time it sampled in
    (the cells and eager-only processes timed in turns with it), where it had one."""
    return {"latency_median_ms": _median(run.latency), "eager_median_ms": _median(run.eager_latency),
            "pairs": run.latency.n if run.latency else None, "round_s": run.round_s, "compile_s": run.compile_s,
            "cache": run.cache, "compile_phases": run.compile_phases, "wall_s": run.wall_s,
            "started_at": run.started_at, "phase_s": run.phase_s, "share_s": run.share_s, "numerics_ok": run.numerics_ok,
            **({"stretch": stretch} if stretch is not None else {})}


def own_seconds(run: CellMeasurement) -> float:
    """A process's own seconds: its wall less the turns it waited for the other workers of its
    stretch (to compile, and in its timing phase beyond its own sampling)."""
    phases = run.phase_s or {}
    sampled = (run.round_s or 0.0) * (run.latency.n if run.latency else 0)
    return max((run.wall_s or 0.0) - phases.get("waiting to compile", 0.0) - phases.get("timing", 0.0) + sampled, 0.0)


def stretch_shares(runs: list[CellMeasurement | None]) -> list[CellMeasurement | None]:
    """The processes of one interleaved stretch, each with its share of the stretch's span
    (first spawn to last exit) in proportion to its own seconds. Each process's wall spans
    the whole stretch, so a cell's summed walls counted it once per worker (the README's main
    job, 32 min, read 3 h 35 min in the next run's estimate); the shares sum to the span."""
    made = [r for r in runs if r is not None and r.started_at is not None and r.wall_s]
    if not made:
        return runs
    starts = [float(r.started_at or 0.0) for r in made]
    span = max(start + float(r.wall_s or 0.0) for start, r in zip(starts, made)) - min(starts)
    own = {id(r): own_seconds(r) for r in made}
    total = sum(own.values()) or float(len(made))
    return [r if r is None or id(r) not in own else
            dataclasses.replace(r, share_s=round(span * (own[id(r)] or total / len(made)) / total, 3)) for r in runs]


def warm_start(runs: list[CellMeasurement]) -> dict[str, Any]:
    """The warm-start figure from the processes after a cold first one: the median of
    their compile seconds (load to first result), and what their caches said."""
    warm = runs[1:]
    if not warm or runs[0].cache != "cold":
        return {}
    verdicts = sorted({str(run.cache) for run in warm})
    return {"warm_start_s": statistics.median(run.compile_s or 0.0 for run in warm),
            "warm_cache": ", ".join(verdicts)}


def pooled_crosscheck(checks: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The cross-checks of a cell's processes as one: the median of their tool medians and
    of their ratios (each process's tool median over its own timed median)."""
    if not checks or checks[0] is None:
        return None
    if any(c is None or "unavailable" in c for c in checks):
        return next((c for c in checks if c and "unavailable" in c), {"unavailable": "a process made no cross-check"})
    made = [c for c in checks if c is not None]  # all of them, by the test above
    return {"tool": made[0]["tool"], "median_ms": statistics.median(c["median_ms"] for c in made),
            "ratio": statistics.median(c["ratio"] for c in made), "processes": len(made),
            "runs": sum(c.get("runs", 0) for c in made), "note": made[0].get("note", "")}


def pooled_decode(records: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The decode records of a cell's processes as one: their per-generation parts pooled,
    token ids agreeing only where every process's did, recompiles summed."""
    if not records or records[0] is None:
        return None
    made = [r for r in records if r is not None]
    diverged = [r["first_divergent_step"] for r in made if r["first_divergent_step"] is not None]
    samples = {side: {part: [x for r in made for x in r["samples"][side][part]] for part in made[0]["samples"][side]}
               for side in made[0]["samples"]}
    return {**made[0], "token_ids_agree": all(r["token_ids_agree"] for r in made),
            "first_divergent_step": min(diverged) if diverged else None,
            "recompiles": sum(r["recompiles"] for r in made), "processes": len(made), "samples": samples}


def _pooled(stats: list[LatencyStats | None]) -> LatencyStats:
    made = [s for s in stats if s is not None]
    return LatencyStats.from_ms([x for s in made for x in s.samples], made[0].number)


def pool_processes(runs: list[CellMeasurement], stretches: list[str] | None = None) -> CellMeasurement:
    """The cell's measurement from its processes'. A process that did not end ``ok``
    decides the cell (with its position said); one process is returned as it is, unless
    ``stretches`` (each process's stretch of interleaved time) must be recorded."""
    if not runs:
        raise ValueError("no process results to pool")
    failed = next((i for i, run in enumerate(runs) if run.status != "ok"), None)
    if failed is not None:
        run = runs[failed]
        if len(runs) > 1 or failed > 0:
            run = dataclasses.replace(run, error=f"process {failed + 1}: {run.error}")
        return run
    first = runs[0]
    if first.latency is None:  # an experiment record: one process, as it is
        return first
    first = dataclasses.replace(first, process_samples=[run.latency.n if run.latency else 0 for run in runs])
    named: list[str | None] = list(stretches) if stretches is not None and len(stretches) == len(runs) else [None] * len(runs)
    if len(runs) == 1:
        return first if named[0] is None else dataclasses.replace(first, processes=[process_summary(first, named[0])])
    numerics_ok = all(run.numerics_ok for run in runs)
    numerics_error = first.numerics_error
    if not numerics_ok and numerics_error is None:
        numerics_error = next(run.numerics_error for run in runs if not run.numerics_ok)
    return dataclasses.replace(
        first, latency=_pooled([run.latency for run in runs]), eager_latency=_pooled([run.eager_latency for run in runs]),
        fp32_eager_latency=None if first.fp32_eager_latency is None else _pooled([r.fp32_eager_latency for r in runs]),
        decode=pooled_decode([run.decode for run in runs]),
        processes=[process_summary(run, stretch) for run, stretch in zip(runs, named)],
        numerics_ok=numerics_ok, numerics_error=numerics_error,
        wall_s=sum(run.wall_s or 0.0 for run in runs), crosscheck=pooled_crosscheck([run.crosscheck for run in runs]),
        **warm_start(runs))


def run_processes(spec: CellSpec, count: int,
                  run_one: Callable[[CellSpec, int], CellMeasurement]) -> CellMeasurement:
    """A cell measured in ``count`` fresh workers one after another, pooled; the first
    worker that does not end ok stops it. ``run_one(spec, index)`` runs one worker."""
    runs: list[CellMeasurement] = []
    with cell_store(spec.cache, count) as store:
        plan = ProcessPlan(count, store)
        for index in range(count):
            runs.append(run_one(plan.spec(spec, index), index))
            if runs[-1].status != "ok":
                break
    return pool_processes(runs)
