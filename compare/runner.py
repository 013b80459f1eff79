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
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from . import environment
from .allocators import GLIBC_TUNED_ENV
from .interleave import run_interleaved
from .pooling import pool_processes
from .process import WorkerProcess, execute_worker, kill_group, last_line
from .results import TRANSIENT_STATUSES, Cell, ResultsError, RunResults, atomic_write_json, variant_label


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
    reference_processes: int = 3  # at least this many for the eager-only reference: its own offset averages out
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
    allocator: str = "glibc-tuned"  # resolved (never "auto"): what the workers ran with
    # Idle pool threads spin briefly ("short", environment.SHORT_SPIN_ENV) or as each
    # runtime's default ("default"): the same for every worker, recorded.
    thread_spin: str = "short"
    malloc_env: dict[str, str] = field(default_factory=lambda: dict(GLIBC_TUNED_ENV))
    # Time the cells of a workload in turns (compare.interleave), so that every cell and
    # the eager-only reference sample the same stretch of time. Local executor only.
    interleave: bool = True

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
        self._workers: list[WorkerProcess] = []  # the running group's workers (interleaved timing)
        self._counter = (0, 0)  # cells recorded, cells planned (for progress)
        self._announced: set[tuple] = set()
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
        self._counter = (done_before, len(full_plan))
        try:
            for group in _groups(plan):
                local = []
                for w, b, batch, dtype in group:
                    ok, reason = availability[b]
                    if ok and self.config.executor == "ray":
                        remote.append((workloads[w], b, batch, dtype))
                    elif ok:
                        local.append(b)
                    else:
                        self._record(results, Cell(workload=w, backend=b, status="unavailable", error=reason,
                                                   batch=batch, dtype=dtype, size=self.config.size,
                                                   device=self.config.device, threads=self.config.threads))
                if local:
                    w, _, batch, dtype = group[0]
                    for cell in self._run_group(workloads[w], local, batch, dtype):
                        self._record(results, cell, announced=True)
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

    def _record(self, results: RunResults, cell: Cell, announced: bool = False) -> None:
        if not announced:
            self._announce(cell.label, cell.backend)
        results.upsert(cell)
        self.save(results)
        self.progress.cell_finished(cell)

    def _announce(self, label: str, backend: str) -> None:
        done, total = self._counter
        self._counter = (done + 1, total)
        self.progress.cell_started(done + 1, total, label, backend)

    def _run_group(self, workload, backends: list[str], batch: int | None, dtype: str) -> list[Cell]:
        """The cells of one (workload, batch, dtype), each in ``processes`` fresh workers;
        with interleaving, one process of every cell at a time, timed in turns."""
        if not self.config.interleave:
            cells = []
            for b in backends:
                self._announce(variant_label(workload.name, batch, dtype), b)
                cells.append(self._as_cell(self._run_cell(workload, b, batch=batch, dtype=dtype)))
            return cells
        base = {b: self.cell_base(workload, b, batch, dtype) for b in backends}
        specs, runs = {}, {b: [] for b in backends}
        for b in backends:
            try:
                specs[b] = self.cell_spec(workload, b, {"interleave": True}, batch, dtype)
            except Exception as exc:  # invalid user workload: the cell fails, the run goes on
                runs[b].append(dict(status="failed", error=f"{type(exc).__name__}: {exc}"))
        rounds = max(1, self.config.processes)
        for index in range(rounds):
            going = [b for b in backends if b in specs and all(r.get("status") == "ok" for r in runs[b])]
            if not going:
                break
            members = [b for b in going for _ in range(self._processes_per_round(b, backends, rounds))]
            ended = run_interleaved([self._starter(specs[b], workload, b, batch, dtype, index) for b in members],
                                    members, "eager", self.config.timeout_s,
                                    int(self.config.timing.get("max_samples", 300)), on_worker=self._set_worker)
            for b, result in zip(members, ended):
                if result is not None:
                    runs[b].append(result)
        return [self._as_cell({**base[b], **pool_processes(runs[b]), "log": self._log_rel(workload, b, batch, dtype)})
                for b in backends]

    def _processes_per_round(self, backend: str, backends: list[str], rounds: int) -> int:
        # The reference runs in several processes even when the cells run in one: each
        # process has an offset of its own (±5 % here), and one offset in the reference
        # would shift every cell's comparison with it. Alone, it is compared with nothing.
        if backend != "eager" or len(backends) == 1:
            return 1
        return max(1, -(-self.config.reference_processes // rounds))

    def _starter(self, spec, workload, backend, batch, dtype, index):
        count = max(1, self.config.processes)

        def on_phase(phase):
            self.progress.phase(workload.name, backend, phase if count == 1 else f"process {index + 1}/{count}: {phase}")

        announced = self._announced

        def start() -> WorkerProcess:
            if (workload.name, backend, batch, dtype) not in announced:
                announced.add((workload.name, backend, batch, dtype))
                self._announce(variant_label(workload.name, batch, dtype), backend)
            return WorkerProcess(dict(spec, process_index=index), self.output_dir / self._log_rel(workload, backend, batch, dtype),
                                 worker_env(self.config), on_phase=on_phase, keep_work_dir=self.config.keep_work_dirs)
        return start

    @staticmethod
    def _log_rel(workload, backend: str, batch, dtype: str, label: str = "") -> str:
        return f"logs/{variant_label(workload.name, batch, dtype)}.{backend}{label}.log"

    def _set_worker(self, worker) -> None:
        if worker is None:
            self._workers = []
        else:
            self._workers.append(worker)

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
        for worker in getattr(self, "_workers", []):
            kill_group(worker.proc)

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
        log_rel = self._log_rel(workload, backend, batch, dtype, label)
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
            results.experiments["roofline_ceilings_error"] = last_line(proc.stderr)
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

def _groups(plan: list[tuple]) -> list[list[tuple]]:
    """Consecutive planned cells that share (workload, batch, dtype)."""
    groups: list[list[tuple]] = []
    for cell in plan:
        if groups and (groups[-1][0][0], groups[-1][0][2], groups[-1][0][3]) == (cell[0], cell[2], cell[3]):
            groups[-1].append(cell)
        else:
            groups.append([cell])
    return groups


def variant_key(workload, size: str, batch: int | None, dtype: str) -> str:
    """The cache key of one cell's model: the workload at that batch (through its
    params) and precision. fp32 keeps the plain key, so existing caches stay valid."""
    key = workload.with_batch(batch).key(size)
    return key if dtype == "fp32" else f"{key}-{dtype}"
