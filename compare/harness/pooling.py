"""One cell from the results of K worker processes that measured it (``--processes K``).

pyperf's lesson: one process's state (where its buffers landed, how its pools were
placed) can bias every sample it takes, so repeat the measurement in fresh processes
and pool. Here the first process is the cell as a single run would give it (its
compile, memory and numerics); every process adds its alternated timing pairs, and
``process_samples`` keeps how many came from each, so the speedup's bootstrap can
resample within processes.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from compare.results.schema import LatencyStats


def _median(stats: dict[str, Any] | None) -> float | None:
    return stats.get("median") if isinstance(stats, dict) else None


def process_summary(run: dict[str, Any]) -> dict[str, Any]:
    latency = run.get("latency") or {}
    return {"latency_median_ms": _median(latency), "eager_median_ms": _median(run.get("eager_latency")),
            "pairs": latency.get("n"), "compile_s": run.get("compile_s"), "wall_s": run.get("wall_s"),
            "numerics_ok": run.get("numerics_ok")}


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
    return first


def run_processes(spec: dict[str, Any], count: int, run_one) -> dict[str, Any]:
    """A cell measured in ``count`` fresh workers one after another, pooled; the first
    worker that does not end ok stops it. ``run_one(spec, index)`` runs one worker."""
    runs = []
    for index in range(count):
        runs.append(run_one(dict(spec, process_index=index), index))
        if runs[-1].get("status") != "ok":
            break
    return pool_processes(runs)
