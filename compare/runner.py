"""The parent process: plans the cells, runs each in a worker, records results.

Design after pyperf: the parent never imports a compiler. Each cell runs in a
child process in its own process group, so a crash, a hang or an
out-of-memory kill costs that cell alone; results.json is rewritten
(atomically) after every cell, so nothing already measured can be lost.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from . import environment
from .allocators import DEFAULT_ALLOCATOR, GLIBC_TUNED_ENV
from .pooling import pool_processes
from .results import TRANSIENT_STATUSES, Cell, ResultsError, RunResults, atomic_write_json, variant_label
from .worker import EVENT_PREFIX, looks_out_of_memory


ALLOCATOR_VARS = ("LD_PRELOAD",)


class OutputError(Exception):
    """The run's files cannot be written (disk full, folder removed): the last saved
    results.json is intact; the message says so in one line."""


class RunInterrupted(Exception):
    """Ctrl-C or SIGTERM: finished cells are saved, the run is marked interrupted."""


@dataclass
class RunConfig:
    backends: list[str]  # "eager" first: it is the reference
    workloads: list[str]
    size: str = "default"
    device: str = "cpu"
    threads: int = 1
    timeout_s: float = 1800.0
    memory_limit_mb: int | None = None
    cache: str = "cold"
    cache_root: str = "tuning_logs"
    output_dir: str = "reports"
    workload_files: list[str] = field(default_factory=list)
    seed: int = 0
    timing: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    keep_work_dirs: bool = False
    numerics_draws: int = 1  # fresh input draws for the numerics check (worst case kept)
    processes: int = 1  # fresh worker processes per cell, their samples pooled (pyperf's repeats)
    batches: list[int] = field(default_factory=list)  # --batch sweep; empty: each workload's own batch
    dtypes: list[str] = field(default_factory=lambda: ["fp32"])  # --dtype sweep
    suite: str = "paper"  # which built-ins ran (recorded; the workloads list is what counts)
    roofline: bool = False  # measure the machine's ceilings and place every cell under them
    executor: str = "local"  # "local": one worker at a time here; "ray": one Ray task per cell
    ray_address: str | None = None
    ray_share_cores: bool = False
    # The malloc of every worker (compare.allocators): a run condition shown with the
    # results. glibc-tuned (the default) serves large buffers from the heap and never
    # trims it: with glibc's defaults every call that allocates a multi-MB output gets
    # fresh mmap pages and a page-fault storm (eager LayerNorm measured 3-8x slower on
    # a 2-core VM), which ORT's own arena hides.
    allocator: str = DEFAULT_ALLOCATOR
    # Idle pool threads spin briefly ("short", environment.SHORT_SPIN_ENV) or as each
    # runtime's default ("default"): the same for every worker, recorded.
    thread_spin: str = "short"
    malloc_env: dict[str, str] = field(default_factory=lambda: dict(GLIBC_TUNED_ENV))

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


class Progress(Protocol):
    def cell_started(self, index: int, total: int, workload: str, backend: str) -> None: ...
    def phase(self, workload: str, backend: str, phase: str) -> None: ...
    def cell_finished(self, cell: Cell) -> None: ...


class SilentProgress:
    def cell_started(self, index, total, workload, backend):
        pass

    def phase(self, workload, backend, phase):
        pass

    def cell_finished(self, cell):
        pass


def worker_env(config: RunConfig) -> dict[str, str]:
    """Same thread count for every backend's runtime, set before any import."""
    # The allocator is the run's, not whatever the parent happened to inherit.
    env = {k: v for k, v in os.environ.items()
           if k not in ALLOCATOR_VARS + environment.SPIN_VARS and not k.startswith("MALLOC_")}
    for var in environment.THREAD_VARS:
        env[var] = str(config.threads)
    env.update(config.malloc_env)
    if config.thread_spin == "short":
        env.update(environment.SHORT_SPIN_ENV)
    env["PYTHONUNBUFFERED"] = "1"
    # The project root on the path, so workers run from a plain checkout too.
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [str(environment.PROJECT_ROOT), env.get("PYTHONPATH", "")] if p
    )
    return env


class Runner:
    def __init__(self, config: RunConfig, progress: Progress | None = None):
        self.config = config
        self.progress = progress or SilentProgress()
        self.output_dir = Path(config.output_dir)
        self._current: subprocess.Popen | None = None
        self.last_results: RunResults | None = None  # what was saved last (for interrupt handling)

    # -- planning -------------------------------------------------------------
    def plan(self) -> list[tuple[str, str, int | None, str]]:
        """(workload, backend, batch, dtype) for every cell. A workload without a batch
        dimension runs once at its own size whatever --batch says."""
        from workloads import resolve_workloads

        cfg = self.config
        has_batch = {w.name: w.batch_param is not None
                     for w in resolve_workloads(cfg.workloads, cfg.workload_files)}
        cells = []
        for w in cfg.workloads:
            batches = cfg.batches if (cfg.batches and has_batch[w]) else [None]
            for batch in batches:
                for dtype in cfg.dtypes:
                    cells += [(w, b, batch, dtype) for b in cfg.backends]
        return cells

    def new_results(self) -> RunResults:
        now = _dt.datetime.now(_dt.timezone.utc)
        env = environment.capture(self.config.threads, self.config.device)
        env["worker_env"] = {k: v for k, v in worker_env(self.config).items()
                             if k in environment.THREAD_VARS + environment.SPIN_VARS + ALLOCATOR_VARS
                             or k.startswith("MALLOC_")}
        env["allocator"] = self.config.allocator
        return RunResults(
            environment=env,
            config=self.config.to_dict(),
            run_id=now.strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid()}",
            started=now.isoformat(timespec="seconds"),
        )

    # -- running --------------------------------------------------------------
    def run(self, results: RunResults | None = None) -> RunResults:
        from adapters import get_backend
        from workloads import resolve_workloads

        results = results or self.new_results()
        (self.output_dir / "logs").mkdir(parents=True, exist_ok=True)
        workloads = {w.name: w for w in resolve_workloads(self.config.workloads, self.config.workload_files)}
        availability = {b: get_backend(b).available(self.config.device) for b in self.config.backends}
        if self.config.roofline:
            self.measure_ceilings(results)
        full_plan = self.plan()
        plan = [cell for cell in full_plan if results.cell(*cell) is None]
        done_before = len(full_plan) - len(plan)
        remote: list[tuple[Any, str, int | None, str]] = []  # cells for the Ray executor
        try:
            for index, (w, b, batch, dtype) in enumerate(plan, start=done_before + 1):
                workload = workloads[w]
                ok, reason = availability[b]
                if ok and self.config.executor == "ray":
                    remote.append((workload, b, batch, dtype))
                    continue
                self.progress.cell_started(index, len(full_plan), variant_label(w, batch, dtype), b)
                if not ok:
                    cell = Cell(workload=w, backend=b, status="unavailable", error=reason, batch=batch, dtype=dtype,
                                size=self.config.size, device=self.config.device, threads=self.config.threads)
                else:
                    cell = self._as_cell(self._run_cell(workload, b, batch=batch, dtype=dtype))
                results.upsert(cell)
                self.save(results)
                self.progress.cell_finished(cell)
            if remote:
                from .ray_executor import run_cells

                run_cells(self, results, remote, self.config.ray_address, self.config.ray_share_cores)
        except (KeyboardInterrupt, RunInterrupted):
            self._kill_current()
            results.state = "interrupted"
            results.finished = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
            self.save(results)
            raise RunInterrupted() from None
        results.state = "complete"
        results.finished = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self.save(results)
        return results

    def save(self, results: RunResults) -> None:
        from .derived import fill_derived
        from .report import write_tables

        fill_derived(results)
        self.last_results = results
        try:
            atomic_write_json(self.output_dir / "results.json", results.to_dict())
            write_tables(results, self.output_dir)
        except OSError as exc:
            self._kill_current()
            raise OutputError(f"cannot write to {self.output_dir} ({exc.strerror or exc}); "
                              "the last saved results.json there is intact") from None

    def _kill_current(self) -> None:
        if self._current is not None:
            kill_group(self._current)

    def cell_spec(self, workload, backend: str, extra: dict[str, Any] | None = None,
                  batch: int | None = None, dtype: str = "fp32") -> dict[str, Any]:
        """Everything a worker needs to measure one cell (plain JSON: it may travel to another node)."""
        cfg = self.config
        return {
            "workload": workload.name,
            "workload_files": [str(Path(f).resolve()) for f in cfg.workload_files],
            "workload_key": variant_key(workload, cfg.size, batch, dtype),
            "size": cfg.size,
            "batch": batch,
            "dtype": dtype,
            "backend": backend,
            "device": cfg.device,
            "threads": cfg.threads,
            "seed": cfg.seed,
            "timing": cfg.timing,
            "options": cfg.options,
            "cache": cfg.cache,
            "cache_root": str(Path(cfg.cache_root).resolve()),
            "memory_limit_mb": cfg.memory_limit_mb,
            "numerics_draws": cfg.numerics_draws,
            **(extra or {}),
        }

    def cell_base(self, workload, backend: str, batch: int | None = None, dtype: str = "fp32") -> dict[str, Any]:
        cfg = self.config
        return dict(workload=workload.name, backend=backend, size=cfg.size, device=cfg.device, threads=cfg.threads,
                    batch=batch, dtype=dtype)

    def _run_cell(self, workload, backend: str, extra: dict[str, Any] | None = None, label: str = "",
                  batch: int | None = None, dtype: str = "fp32") -> dict[str, Any]:
        """One cell in ``processes`` fresh workers, start to finish; returns the cell's
        fields (never raises for anything a worker does: crashes, hangs and bad results
        become a status). Experiments (``extra``) run in one worker."""
        cfg = self.config
        base = self.cell_base(workload, backend, batch, dtype)
        try:
            spec = self.cell_spec(workload, backend, extra, batch, dtype)
        except Exception as exc:  # invalid user workload: the cell fails, the run goes on
            return dict(status="failed", error=f"{type(exc).__name__}: {exc}", **base)
        log_rel = f"logs/{variant_label(workload.name, batch, dtype)}.{backend}{label}.log"
        count = 1 if extra else max(1, cfg.processes)
        runs = []
        for index in range(count):
            def on_phase(phase, index=index):
                self.progress.phase(workload.name, backend, phase if count == 1 else f"process {index + 1}/{count}: {phase}")

            runs.append(execute_worker(dict(spec, process_index=index), self.output_dir / log_rel, cfg.timeout_s,
                                       worker_env(cfg), on_phase=on_phase, on_start=self._set_current,
                                       keep_work_dir=cfg.keep_work_dirs))
            self._current = None
            if runs[-1].get("status") != "ok":
                break
        return {**base, **pool_processes(runs), "log": log_rel}

    def _set_current(self, proc) -> None:
        self._current = proc

    @staticmethod
    def _as_cell(data: dict[str, Any]) -> Cell:
        try:
            return Cell.from_dict(data)
        except (ResultsError, TypeError) as exc:
            keep = {k: data[k] for k in ("workload", "backend", "size", "device", "threads", "batch", "dtype")
                    if k in data}
            return Cell(status="failed", error=f"worker returned an invalid result: {exc}", **keep)

    # -- experiments beyond the cell table -------------------------------------------
    def measure_ceilings(self, results: RunResults) -> None:
        """The roofline's two ceilings, once per run, in a worker with the run's threads."""
        if "roofline_ceilings" in results.experiments:
            return
        proc = subprocess.run([sys.executable, "-m", "compare.roofline", str(self.config.threads)],
                              capture_output=True, text=True, env=worker_env(self.config), timeout=600)
        if proc.returncode == 0:
            results.experiments["roofline_ceilings"] = json.loads(proc.stdout.strip().splitlines()[-1])
        else:
            results.experiments["roofline_ceilings_error"] = _last_line(proc.stderr)
        self.save(results)

    def run_dynamic(self, results: RunResults, backends: list[str], distinct: int, calls: int,
                    steady_calls: int = 15) -> None:
        """Specialize vs symbolic for every (workload, backend), each strategy in its own worker."""
        from adapters import get_backend
        from workloads import resolve_workloads

        from . import dynamic

        section = results.experiments.setdefault("dynamic_shapes", {"records": []})
        workloads = resolve_workloads(self.config.workloads, self.config.workload_files)
        # On resume, records that ended for good (ok, unavailable, failed) are kept.
        kept = {(r["workload"], r["backend"], r["strategy"]) for r in section["records"]
                if r.get("status") not in TRANSIENT_STATUSES}
        plan = [(w, b, s) for w in workloads for b in backends for s in dynamic.STRATEGIES
                if (w.name, b, s) not in kept]
        section["protocol"] = {"distinct_sizes": distinct, "calls": calls, "steady_calls_per_size": steady_calls,
                               "seed": self.config.seed, "threads": self.config.threads, "size": self.config.size}
        try:
            for index, (workload, backend, strategy) in enumerate(plan, start=1):
                self.progress.cell_started(index, len(plan), workload.name, f"{backend} ({strategy})")
                ok, reason = get_backend(backend).available(self.config.device)
                base = {"workload": workload.name, "backend": backend, "strategy": strategy}
                if not ok:
                    record = dict(base, status="unavailable", error=reason)
                else:
                    shapes = dynamic.shape_plan(workload, self.config.size, distinct, calls, self.config.seed)
                    section.setdefault("plans", {})[workload.name] = shapes
                    record = self._run_cell(workload, backend, {
                        "experiment": "dynamic", "strategy": strategy, "dynamic": shapes,
                        "steady_calls": steady_calls, "count_work": False}, label=f".dynamic-{strategy}")
                    record = {**base, **record}
                section["records"] = [r for r in section["records"]
                                      if (r["workload"], r["backend"], r["strategy"]) != (workload.name, backend, strategy)]
                section["records"].append(record)
                section["summary"] = dynamic.summarize(section["records"])
                self.save(results)
                self.progress.cell_finished(Cell(workload=workload.name, backend=f"{backend} ({strategy})",
                                                 status=record["status"], error=record.get("error")))
        except KeyboardInterrupt:
            self._kill_current()
            results.state = "interrupted"
            self.save(results)
            raise RunInterrupted() from None

def variant_key(workload, size: str, batch: int | None, dtype: str) -> str:
    """The cache key of one cell's model: the workload at that batch (through its
    params) and precision. fp32 keeps the plain key, so existing caches stay valid."""
    key = workload.with_batch(batch).key(size)
    return key if dtype == "fp32" else f"{key}-{dtype}"


def execute_worker(spec: dict[str, Any], log_path: Path, timeout_s: float, env: dict[str, str],
                   on_phase=None, on_start=None, keep_work_dir: bool = False) -> dict[str, Any]:
    """Run ``python -m compare.worker`` for one spec in its own process group, with a
    timeout; returns the worker's result or a status saying how it ended. Used by the
    local runner and, unchanged, inside a Ray task on another node."""
    work_dir = Path(tempfile.mkdtemp(prefix=f"dlcompare-{spec['workload']}-{spec['backend']}-"))
    spec = dict(spec, work_dir=str(work_dir))
    spec_path = work_dir / "spec.json"
    result_path = work_dir / "result.json"
    spec_path.write_text(json.dumps(spec, indent=2))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    last_phase = {"name": "start"}
    start = time.perf_counter()
    with open(log_path, "a") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "compare.worker", str(spec_path), str(result_path)],
            stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, cwd=work_dir, env=env,
            start_new_session=True,  # its own process group: killed as one, deaf to our Ctrl-C
            text=True, bufsize=1,
        )
        if on_start:
            on_start(proc)
        reader = threading.Thread(target=_read_events, args=(proc, log, last_phase, on_phase), daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc)
        reader.join(timeout=5)
    cell = _collect(proc.returncode, timed_out, timeout_s, result_path, log_path, last_phase["name"])
    cell.update(wall_s=time.perf_counter() - start, workload_key=spec["workload_key"])
    if not keep_work_dir:
        shutil.rmtree(work_dir, ignore_errors=True)
    return cell


def kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _read_events(proc, log, last_phase: dict, on_phase) -> None:
    for line in proc.stdout:
        if line.startswith(EVENT_PREFIX):
            try:
                event = json.loads(line[len(EVENT_PREFIX):])
            except json.JSONDecodeError:
                continue
            if "phase" in event:
                last_phase["name"] = event["phase"]
                if on_phase:
                    on_phase(event["phase"])
        else:
            log.write(line)
            log.flush()


def _collect(returncode: int, timed_out: bool, timeout_s: float, result_path: Path, log_path: Path,
             last_phase: str) -> dict[str, Any]:
    if timed_out:
        return dict(status="timeout", error=f"no result within {timeout_s:g} s (was in phase {last_phase!r})")
    if result_path.exists():
        try:
            data = json.loads(result_path.read_text())
            data.pop("worker_s", None)
            return data
        except (OSError, ValueError) as exc:
            return dict(status="failed", error=f"worker result unreadable: {exc}")
    tail = _log_tail(log_path)
    if looks_out_of_memory(tail):
        return dict(status="out_of_memory", error=f"worker ran out of memory in phase {last_phase!r}: {_last_line(tail)}")
    if returncode is not None and returncode < 0:
        sig = signal.Signals(-returncode).name
        hint = " (the kernel's OOM killer, or an external kill)" if sig == "SIGKILL" else ""
        return dict(status="failed", error=f"worker killed by {sig}{hint} in phase {last_phase!r}")
    return dict(status="failed", error=f"worker exited with code {returncode} in phase {last_phase!r}: {_last_line(tail)}")


def _log_tail(path: Path, chars: int = 4000) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - chars))
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"
