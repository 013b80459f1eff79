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
from typing import Any, Iterator

from compare.measure.timing import TimingConfig
from compare.results.schema import LatencyStats


def process_timing(timing: dict[str, Any], count: int) -> dict[str, Any]:
    """One process's share of a cell's timing: the budget and the sample cap split over
    ``count`` processes, and the precision target widened by sqrt(count), so that K
    processes sample about as long as one did and their pooled median is as precise."""
    cfg = TimingConfig(**timing)
    if count > 1:
        cfg = dataclasses.replace(cfg, budget_s=cfg.budget_s / count, target_rel_se=cfg.target_rel_se * math.sqrt(count),
                                  max_samples=max(cfg.min_samples, -(-cfg.max_samples // count)))
    return dataclasses.asdict(cfg)


@dataclass(frozen=True)
class ProcessPlan:
    """How the K processes of one cell share its work. In a cold run the first compiles
    from nothing into a store made for the cell, and the others load what it stored
    through the backend's own warm path (a vmfb, a .pt2, an ORT model, OpenVINO's cache,
    TVM's log, Inductor's caches): K processes cost one compile and K-1 warm starts."""
    count: int
    store_root: str | None = None  # None: a warm run (the persistent store) or one process

    def spec(self, spec: dict[str, Any], index: int) -> dict[str, Any]:
        out = dict(spec, process_index=index, timing=process_timing(spec.get("timing", {}), self.count))
        if index > 0:  # the cell keeps the first process's profile, counted work and GEMM libraries
            out.update(explain=False, count_work=False)
        if self.store_root is not None:
            out.update(cache="warm", store_root=self.store_root, fresh_store=index == 0)
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


def _median(stats: dict[str, Any] | None) -> float | None:
    return stats.get("median") if isinstance(stats, dict) else None


def process_summary(run: dict[str, Any]) -> dict[str, Any]:
    latency = run.get("latency") or {}
    return {"latency_median_ms": _median(latency), "eager_median_ms": _median(run.get("eager_latency")),
            "pairs": latency.get("n"), "round_s": run.get("round_s"), "compile_s": run.get("compile_s"),
            "cache": run.get("cache"), "compile_phases": run.get("compile_phases"), "wall_s": run.get("wall_s"),
            "started_at": run.get("started_at"), "numerics_ok": run.get("numerics_ok")}


def warm_start(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The warm-start figure from the processes after a cold first one: the median of
    their compile seconds (load to first result), and what their caches said."""
    warm = runs[1:]
    if not warm or runs[0].get("cache") != "cold":
        return {}
    verdicts = sorted({str(run.get("cache")) for run in warm})
    return {"warm_start_s": statistics.median(run.get("compile_s") or 0.0 for run in warm),
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


def _pooled(runs: list[dict[str, Any]], field: str) -> dict[str, Any]:
    samples = [x for run in runs for x in run[field]["samples"]]
    return dataclasses.asdict(LatencyStats.from_ms(samples, runs[0][field]["number"]))


def pool_processes(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The cell's fields from its processes' results. A process that did not end ``ok``
    decides the cell (with its position said); one process is returned as it is."""
    if not runs:
        raise ValueError("no process results to pool")
    failed = next((i for i, run in enumerate(runs) if run.get("status") != "ok"), None)
    if failed is not None:
        run = dict(runs[failed])
        if len(runs) > 1 or failed > 0:
            run["error"] = f"process {failed + 1}: {run.get('error')}"
        return run
    first = dict(runs[0])
    if not isinstance(first.get("latency"), dict):  # an experiment record: one process, as it is
        return first
    first["process_samples"] = [run["latency"]["n"] for run in runs]
    if len(runs) == 1:
        return first
    first["latency"] = _pooled(runs, "latency")
    first["eager_latency"] = _pooled(runs, "eager_latency")
    first["processes"] = [process_summary(run) for run in runs]
    first["numerics_ok"] = all(run.get("numerics_ok") for run in runs)
    if not first["numerics_ok"] and first.get("numerics_error") is None:
        first["numerics_error"] = next(run.get("numerics_error") for run in runs if not run.get("numerics_ok"))
    first["wall_s"] = sum(run.get("wall_s") or 0.0 for run in runs)
    first["crosscheck"] = pooled_crosscheck([run.get("crosscheck") for run in runs])
    first.update(warm_start(runs))
    return first


def run_processes(spec: dict[str, Any], count: int, run_one) -> dict[str, Any]:
    """A cell measured in ``count`` fresh workers one after another, pooled; the first
    worker that does not end ok stops it. ``run_one(spec, index)`` runs one worker."""
    runs: list[dict[str, Any]] = []
    with cell_store(spec.get("cache", "cold"), count) as store:
        plan = ProcessPlan(count, store)
        for index in range(count):
            runs.append(run_one(plan.spec(spec, index), index))
            if runs[-1].get("status") != "ok":
                break
    return pool_processes(runs)
