"""--scenario server: MLPerf LoadGen's Server scenario against a compiled model.

After the cell's usual compile, numerics and back-to-back timing, LoadGen issues queries
with Poisson arrivals at a target QPS; a queue in this process takes them as they arrive
and one thread serves them one at a time with the compiled call (``QueueSUT``). LoadGen
measures each query from its scheduled arrival to its completion, so time spent waiting
in the queue counts, as it does for a user of a server.

The search (``QpsSearch``) bisects the QPS over (0, capacity], where capacity is
1 / (the side's back-to-back median): one query at a time cannot sustain more. A run
meets the bound when LoadGen says its p99 is within it ("Performance constraints
satisfied"); the highest QPS that met it is the side's ``max_qps``. Eager runs in the
same worker, its runs alternated with the backend's (ABBA), under the same bound, so the
QPS ratio is paired in time like the speedup.

LoadGen itself is an optional package (``pip install 'dlcompare[loadgen]'``, the
``mlcommons-loadgen`` wheel); without it a server cell is ``unavailable`` with that reason.
Nothing here imports it before it is needed.
"""
from __future__ import annotations

import importlib
import queue
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from compare.measure.stats import request_percentiles

LOADGEN_DISTRIBUTION = "mlcommons-loadgen"
LOADGEN_MISSING = ("--scenario server needs MLPerf LoadGen, which is not installed: "
                   "pip install -e '.[loadgen]' (dlcompare[loadgen], the mlcommons-loadgen wheel)")
# The default p99 bound: this many times eager's back-to-back median in the cell, and at
# least MIN_BOUND_MS: below a millisecond the bound would judge LoadGen's issue path, the
# Python queue and the OS scheduler (tens of microseconds to a millisecond on a shared
# 2-core VM), not the backend.
BOUND_FACTOR = 10.0
MIN_BOUND_MS = 1.0
# A run stops issuing after this many times its minimum duration even when it has not
# reached its minimum query count (a slow model at a low QPS), so that no run takes minutes.
MAX_RUN_FACTOR = 4


class LoadgenMissing(RuntimeError):
    """LoadGen cannot be imported; the message says how to install it."""


@dataclass(frozen=True)
class ServerConfig:
    """The server scenario's parameters, the same for every cell of a run (``--server-*``)."""
    p99_ms: float | None = None  # the p99 bound; None: BOUND_FACTOR x eager's median, at least MIN_BOUND_MS
    run_ms: int = 2500  # LoadGen's min_duration_ms of each run
    runs: int = 6  # LoadGen runs per side (the backend, eager): the search's steps
    min_queries: int = 100  # LoadGen's min_query_count of each run: p99 is then an observed query


def loadgen_module():
    """The ``mlperf_loadgen`` module, or LoadgenMissing with the install hint."""
    try:
        return importlib.import_module("mlperf_loadgen")
    except ImportError as exc:
        raise LoadgenMissing(f"{LOADGEN_MISSING} ({exc})") from None


def loadgen_version() -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(LOADGEN_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


# ----------------------------------------------------------------------------- the summary

_FLAGS = {"Performance constraints satisfied": "perf_constraints", "Min duration satisfied": "min_duration",
          "Min queries satisfied": "min_queries", "Early stopping satisfied": "early_stopping"}
_NUMBERS = {"Completed samples per second": "completed_qps", "Scheduled samples per second": "scheduled_qps",
            "target_qps": "target_qps"}
_LATENCIES = {"Min latency (ns)": "min_ms", "Max latency (ns)": "max_ms", "Mean latency (ns)": "mean_ms",
              "target_latency (ns)": "target_latency_ms"}
_PERCENTILE = re.compile(r"^(\d+(?:\.\d+)?) percentile latency \(ns\)$")


def parse_summary(text: str) -> dict[str, Any]:
    """The figures of LoadGen's ``mlperf_log_summary.txt``: scenario, mode, result (VALID or
    INVALID), each constraint's yes/no, completed and scheduled QPS, the target QPS and
    latency, and the latencies in ms (min, mean, max, p50/p90/p95/p97/p99/p99.9). Raises
    ValueError when the text holds no result line (not a summary, or a run cut short)."""
    out: dict[str, Any] = {}
    for line in text.splitlines():
        if ":" not in line:
            continue
        key, value = (part.strip() for part in line.split(":", 1))
        if key in ("Scenario", "Mode"):
            out[key.lower()] = value
        elif key == "Result is":
            out["result"] = value
        elif key in _FLAGS:
            out[_FLAGS[key]] = value.lower() == "yes"
        elif key in _NUMBERS:
            out[_NUMBERS[key]] = float(value)
        elif key in _LATENCIES:
            out[_LATENCIES[key]] = int(value) / 1e6
        elif match := _PERCENTILE.match(key):
            out[f"p{float(match.group(1)):g}_ms"] = int(value) / 1e6
    if "result" not in out:
        raise ValueError("no 'Result is' line: not a complete LoadGen summary")
    return out


# ----------------------------------------------------------------------------- the system under test

class QueueSUT:
    """The system under test LoadGen drives: each query is queued as LoadGen issues it, and
    one thread serves the queue in order with ``call`` (one compiled call, synchronized),
    then tells LoadGen it completed. Its own latencies run from the issue callback to the
    completion (dlcompare's figure beside LoadGen's, which starts at the scheduled time)."""

    def __init__(self, lg, call: Callable[[], None]):
        self.lg, self.call = lg, call
        self.pending: queue.SimpleQueue = queue.SimpleQueue()
        self.latencies_s: list[float] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self.serve, name="dlcompare-sut", daemon=True)

    def issue(self, samples) -> None:
        arrived = time.perf_counter()
        for sample in samples:
            self.pending.put((sample.id, arrived))

    def flush(self) -> None:
        pass

    def serve(self) -> None:
        while (item := self.pending.get()) is not None:
            query_id, arrived = item
            if self.error is None:
                try:
                    self.call()
                except BaseException as exc:  # noqa: BLE001 - kept and raised after the run: LoadGen must not hang
                    self.error = exc
            self.latencies_s.append(time.perf_counter() - arrived)
            # every query completes, even after an error: LoadGen waits for all it issued
            self.lg.QuerySamplesComplete([self.lg.QuerySampleResponse(query_id, 0, 0)])

    def __enter__(self) -> "QueueSUT":
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.pending.put(None)
        self.thread.join()


def loadgen_settings(lg, qps: float, bound_ms: float, config: ServerConfig):
    settings = lg.TestSettings()
    settings.scenario = lg.TestScenario.Server
    settings.mode = lg.TestMode.PerformanceOnly
    settings.server_target_qps = float(qps)
    settings.server_target_latency_ns = int(bound_ms * 1e6)
    settings.server_target_latency_percentile = 0.99
    settings.min_duration_ms = int(config.run_ms)
    settings.max_duration_ms = int(MAX_RUN_FACTOR * config.run_ms)
    settings.min_query_count = int(config.min_queries)
    return settings


def loadgen_run(lg, call: Callable[[], None], qps: float, bound_ms: float, config: ServerConfig,
                out_dir: Path) -> dict[str, Any]:
    """One LoadGen Server run at ``qps``: its parsed summary (``parse_summary``), whether it
    met the bound, and dlcompare's own count, throughput and p50/p99 of the same queries."""
    out_dir.mkdir(parents=True, exist_ok=True)
    output = lg.LogOutputSettings()
    output.outdir = str(out_dir)
    output.copy_summary_to_stdout = False
    log_settings = lg.LogSettings()
    log_settings.log_output = output
    log_settings.enable_trace = False
    # LoadGen reads settings over ours from an "audit.config" in the working folder when one
    # is there: name a file that is not
    audit = str(out_dir / "no-audit.config")
    start = time.perf_counter()
    with QueueSUT(lg, call) as sut:
        handle = lg.ConstructSUT(sut.issue, sut.flush)
        qsl = lg.ConstructQSL(1, 1, _no_samples, _no_samples)  # every query is the cell's one prepared input
        try:
            lg.StartTestWithLogSettings(handle, qsl, loadgen_settings(lg, qps, bound_ms, config), log_settings, audit)
        finally:
            lg.DestroyQSL(qsl)
            lg.DestroySUT(handle)
    wall_s = time.perf_counter() - start
    if sut.error is not None:
        raise sut.error
    summary = parse_summary((out_dir / "mlperf_log_summary.txt").read_text())
    own = request_percentiles([s * 1e3 for s in sut.latencies_s])
    return {"target_qps": qps, "met": bool(summary.get("perf_constraints")), **summary,
            "completed": len(sut.latencies_s), "wall_s": wall_s,
            "own_p50_ms": own["p50"], "own_p99_ms": own["p99"], "own_max_ms": own["max"]}


def _no_samples(samples) -> None:
    """The QSL's load and unload: the one input is prepared before the test."""


# ----------------------------------------------------------------------------- the search

@dataclass
class QpsSearch:
    """Bisection of the highest QPS whose p99 meets the bound, over (0, capacity]: the first
    run at half the capacity, each next one halfway between the highest that met the bound
    (0 at first) and the lowest that missed it (the capacity until one did). A miss caps
    the search only once a second run at the same QPS misses too: on a shared machine one
    noisy stretch made eager miss at half its capacity, and the search, never going back
    above a miss, then read eager's QPS at a third of what it sustains."""
    capacity_qps: float
    met_qps: float = 0.0
    missed_qps: float | None = None
    unconfirmed_miss: float | None = None  # a miss the next run repeats before it counts
    runs: list[dict[str, Any]] = field(default_factory=list)

    def next_qps(self) -> float:
        if self.unconfirmed_miss is not None:
            return self.unconfirmed_miss
        top = self.capacity_qps if self.missed_qps is None else self.missed_qps
        return (self.met_qps + top) / 2

    def record(self, run: dict[str, Any]) -> None:
        self.runs.append(run)
        qps = run["target_qps"]
        if run["met"]:
            self.met_qps = max(self.met_qps, qps)
            self.unconfirmed_miss = None
            run["verdict"] = "met"
        elif self.unconfirmed_miss == qps:
            self.missed_qps = qps if self.missed_qps is None else min(self.missed_qps, qps)
            self.unconfirmed_miss = None
            run["verdict"] = "missed (confirmed)"
        else:
            self.unconfirmed_miss = qps
            run["verdict"] = "missed (to be confirmed)"

    def result(self) -> dict[str, Any]:
        """max_qps (None: no run met the bound), LoadGen's and dlcompare's p99 in that run,
        the capacity the search started from, and every run."""
        best = max((r for r in self.runs if r["met"]), key=lambda r: r["target_qps"], default=None)
        return {"max_qps": best["target_qps"] if best else None,
                "p99_at_max_ms": best.get("p99_ms") if best else None,
                "own_p99_at_max_ms": best.get("own_p99_ms") if best else None,
                "capacity_qps": self.capacity_qps, "loadgen_runs": self.runs}


@dataclass(frozen=True)
class Served:
    """One side of the search: its name, its call and its back-to-back median (ms)."""
    name: str  # "backend", or the in-cell reference's key (compare.results.roles.REFERENCE_SIDE)
    call: Callable[[], None]
    median_ms: float


def p99_bound(config: ServerConfig, eager_median_ms: float) -> tuple[float, str]:
    """The bound every side of the cell is held to, and how it was set."""
    if config.p99_ms is not None:
        return config.p99_ms, "--server-p99-ms"
    bound = max(BOUND_FACTOR * eager_median_ms, MIN_BOUND_MS)
    return bound, f"{BOUND_FACTOR:g}x eager's back-to-back median in the cell, at least {MIN_BOUND_MS:g} ms"


def measure_server(sides: list[Served], eager_median_ms: float, config: ServerConfig, out_dir: Path,
                   on_run: Callable[[str, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The search for every side (the backend first, eager second when it is a separate
    side), their runs alternated ABBA; the cell's ``server`` record."""
    lg = loadgen_module()
    bound_ms, rule = p99_bound(config, eager_median_ms)
    searches = {s.name: QpsSearch(1e3 / s.median_ms) for s in sides}
    for step in range(config.runs):
        for side in (sides if step % 2 == 0 else sides[::-1]):
            search = searches[side.name]
            qps = search.next_qps()
            run = loadgen_run(lg, side.call, qps, bound_ms, config, out_dir / f"{side.name}-{step}")
            search.record(run)
            if on_run:
                on_run(side.name, run)
    backend = searches[sides[0].name].result()
    record: dict[str, Any] = {"loadgen_version": loadgen_version(), "p99_bound_ms": bound_ms, "bound_rule": rule,
                              "run_ms": config.run_ms, "max_run_ms": MAX_RUN_FACTOR * config.run_ms,
                              "min_queries": config.min_queries, "runs_per_side": config.runs, **backend}
    if len(sides) > 1:
        eager = searches[sides[1].name].result()
        record[sides[1].name] = eager  # the in-cell reference, under the name the worker gave it
        record["qps_ratio_vs_eager"] = (backend["max_qps"] / eager["max_qps"]
                                        if backend["max_qps"] and eager["max_qps"] else None)
    return record
