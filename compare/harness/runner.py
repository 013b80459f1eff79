"""The parent process: plans the cells, runs each in a worker, records results.

Design after pyperf: the parent never imports a compiler. Each cell runs in a
child process in its own process group, so a crash, a hang or an
out-of-memory kill costs that cell alone; results.json is rewritten
(atomically) after every cell, so nothing already measured can be lost.
"""
from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Protocol

from compare.harness import environment
from compare.harness.cells import ALLOCATOR_VARS, CellSpecs, worker_env
from compare.harness.executor import CellGroup, Executor, Hooks, LocalExecutor, RunInterrupted
from compare.harness.process import last_line
from compare.harness.run_config import RunConfig
from compare.results.protocol import DynamicSpec
from compare.results.roles import role_of
from compare.results.schema import TRANSIENT_STATUSES, Cell, RunResults, atomic_write_json, variant_label

__all__ = ["OutputError", "RunConfig", "RunInterrupted", "Runner", "worker_env"]


class OutputError(Exception):
    """The run's files cannot be written (disk full, folder removed): the last saved
    results.json is intact; the message says so in one line."""


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


class Runner:
    """Plans the cells, has an executor run them, records every cell as it ends."""

    def __init__(self, config: RunConfig, progress: Progress | None = None,
                 write: Callable[[RunResults, Path], None] | None = None):
        """``write`` saves the results after every cell (the report layer's writer, which
        adds the tables); by default only results.json is written."""
        self.config = config
        self.write = write or (lambda results, out: atomic_write_json(out / "results.json", results.to_dict()))
        self.progress = progress or SilentProgress()
        self.output_dir = Path(config.output_dir)
        self.specs = CellSpecs(config)
        self._executor: Executor | None = None
        self._counter = (0, 0)  # cells announced, cells planned (for progress)
        self._order: dict[tuple, int] = {}  # planned cell -> its place in the tables
        self.last_results: RunResults | None = None  # what was saved last (for interrupt handling)

    # -- planning -------------------------------------------------------------
    @functools.cached_property
    def workloads(self) -> dict[str, Any]:
        """The run's workloads by name, resolved once (a --model spec reads its file to resolve)."""
        from workloads import resolve_workloads
        from workloads.llm import with_lengths

        cfg = self.config
        return {w.name: with_lengths(w, cfg.prompt_len, cfg.gen_len)
                for w in resolve_workloads(cfg.workloads, cfg.workload_files)}

    def plan(self) -> list[tuple[str, str, int | None, str]]:
        """(workload, backend, batch, dtype) for every cell. A workload without a batch
        dimension runs once at its own size whatever --batch says."""
        cfg = self.config
        has_batch = {name: w.batch_param is not None for name, w in self.workloads.items()}
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
        results = results or self.new_results()
        (self.output_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.probe_noise(results, "before")
        if self.config.roofline:
            self.measure_ceilings(results)
        full_plan = self.plan()
        plan = [cell for cell in full_plan if results.cell(*cell) is None]
        self._counter = (len(full_plan) - len(plan), len(full_plan))
        self._order = {cell: index for index, cell in enumerate(full_plan)}
        try:
            groups = self._runnable_groups(plan, results)
            self._executor = self._make_executor(results)
            self._executor.run(groups)
        except (KeyboardInterrupt, RunInterrupted):
            self._kill_current()
            self._finish(results, "interrupted")
            raise RunInterrupted() from None
        self.probe_noise(results, "after")
        self._finish(results, "complete")
        return results

    def _runnable_groups(self, plan, results: RunResults) -> list[CellGroup]:
        """The plan as groups of cells to run; a backend unavailable here is recorded as
        such at once, with its reason."""
        from adapters import get_backend

        workloads = self.workloads
        availability = {b: get_backend(b).available(self.config.device) for b in self.config.backends}
        groups = []
        for group in _groups(plan):
            w, _, batch, dtype = group[0]
            runnable = []
            for _, b, _, _ in group:
                ok, reason = availability[b]
                if ok and (refused := get_backend(b).unavailable_for(workloads[w].tags)):
                    ok, reason = False, refused
                if ok:
                    runnable.append(b)
                    continue
                self._announce(variant_label(w, batch, dtype), b)
                self._record(results, Cell(workload=w, backend=b, status="unavailable", error=reason, batch=batch,
                                           dtype=dtype, role=role_of(b, dtype, self.config.reference),
                                           size=self.config.size, device=self.config.device,
                                           threads=self.config.threads))
            if runnable:
                groups.append(CellGroup(workloads[w], tuple(runnable), batch, dtype))
        return groups

    def _make_executor(self, results: RunResults) -> Executor:
        hooks = Hooks(announce=self._announce, phase=self.progress.phase,
                      record=lambda cell: self._record(results, cell),
                      update=lambda cell: self._record(results, cell, finished=False),
                      extra_pass=lambda workload, number, backends: self.progress.phase(
                          workload, ",".join(backends), f"pass {number}: one more process (interval wider than 5 %)"))
        if self.config.executor == "ray":
            from compare.harness.ray_executor import RayExecutor

            return RayExecutor(self.specs, hooks, self.output_dir, results.environment)
        return LocalExecutor(self.specs, hooks, self.output_dir)

    def _finish(self, results: RunResults, state: str) -> None:
        results.state = state
        results.finished = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self.save(results)

    def _record(self, results: RunResults, cell: Cell, finished: bool = True) -> None:
        """Keep a cell as it ends (or as far as it got), in plan order (executors may finish
        cells in any order)."""
        results.upsert(cell)
        end = len(self._order)
        results.cells.sort(key=lambda c: self._order.get((c.workload, c.backend, c.batch, c.dtype), end))
        self.save(results)
        if finished:
            self.progress.cell_finished(cell)

    def _announce(self, label: str, backend: str) -> None:
        done, total = self._counter
        self._counter = (done + 1, total)
        self.progress.cell_started(done + 1, total, label, backend)

    def save(self, results: RunResults) -> None:
        from compare.results.derived import fill_derived

        fill_derived(results)
        self.last_results = results
        try:
            self.write(results, self.output_dir)
        except OSError as exc:
            self._kill_current()
            raise OutputError(f"cannot write to {self.output_dir} ({exc.strerror or exc}); "
                              "the last saved results.json there is intact") from None

    def _kill_current(self) -> None:
        if self._executor is not None:
            self._executor.kill()

    # -- experiments beyond the cell table -------------------------------------------
    def measure_ceilings(self, results: RunResults) -> None:
        """The roofline's two ceilings, once per run, in a worker with the run's threads."""
        if "roofline_ceilings" in results.experiments:
            return
        ok, data = self._child_json(["compare.experiments.roofline", str(self.config.threads)], timeout=600)
        results.experiments["roofline_ceilings" if ok else "roofline_ceilings_error"] = data
        self.save(results)

    def _child_json(self, module_argv: list[str], timeout: float) -> tuple[bool, Any]:
        """``python -m MODULE ARGS`` with the workers' environment: (True, the JSON of its
        last stdout line), or (False, the last line of its stderr)."""
        proc = subprocess.run([sys.executable, "-m", *module_argv], capture_output=True, text=True,
                              env=worker_env(self.config), timeout=timeout)
        if proc.returncode != 0:
            return False, last_line(proc.stderr)
        return True, json.loads(proc.stdout.strip().splitlines()[-1])

    def probe_noise(self, results: RunResults, when: str) -> None:
        """The machine's noise (``compare.experiments.noise.machine_probe``) in a fresh
        process, before or after the cells; a probe that fails is recorded as such."""
        seconds = self.config.noise_probe_s
        probes = results.experiments.setdefault("noise_probe", {})
        if not seconds or when in probes:
            return
        argv = ["compare.experiments.noise", str(seconds)]
        if self.config.affinity:
            argv.append(",".join(map(str, self.config.affinity)))
        try:
            ok, data = self._child_json(argv, timeout=60 + 2 * seconds)
            probes[when] = data if ok else {"error": data}
        except (subprocess.SubprocessError, ValueError, IndexError) as exc:
            probes[when] = {"error": f"{type(exc).__name__}: {exc}"}
        self.save(results)

    def run_dynamic(self, results: RunResults, backends: list[str], distinct: int, calls: int,
                    steady_calls: int = 15) -> None:
        """Specialize vs symbolic for every (workload, backend), each strategy in its own worker."""
        from compare.experiments import dynamic

        section = results.experiments.setdefault("dynamic_shapes", {"records": []})
        workloads = list(self.workloads.values())
        # On resume, records that ended for good (ok, unavailable, failed) are kept.
        kept = {(r["workload"], r["backend"], r["strategy"]) for r in section["records"] if not _transient(r)}
        plan = [(w, b, s) for w in workloads for b in backends for s in dynamic.STRATEGIES
                if (w.name, b, s) not in kept]
        section["protocol"] = {"distinct_sizes": distinct, "calls": calls, "steady_calls_per_size": steady_calls,
                               "seed": self.config.seed, "threads": self.config.threads, "size": self.config.size}
        executor = LocalExecutor(self.specs, Hooks(self._announce, self.progress.phase, lambda cell: None),
                                 self.output_dir)
        self._executor = executor
        try:
            for index, (workload, backend, strategy) in enumerate(plan, start=1):
                self.progress.cell_started(index, len(plan), workload.name, f"{backend} ({strategy})")
                record = self._dynamic_record(executor, workload, backend, strategy, distinct, calls, steady_calls,
                                              section)
                section["records"] = [r for r in section["records"]
                                      if (r["workload"], r["backend"], r["strategy"]) != (workload.name, backend, strategy)]
                section["records"].append(record)
                section["summary"] = dynamic.summarize_records(section["records"])
                self.save(results)
                self.progress.cell_finished(Cell(workload=workload.name, backend=f"{backend} ({strategy})",
                                                 status=record["status"], error=record.get("error")))
        except KeyboardInterrupt:
            self._kill_current()
            results.state = "interrupted"
            self.save(results)
            raise RunInterrupted() from None

    def _dynamic_record(self, executor: LocalExecutor, workload, backend: str, strategy: str, distinct: int,
                        calls: int, steady_calls: int, section: dict) -> dict[str, Any]:
        from adapters import get_backend
        from compare.experiments import dynamic

        base = {"workload": workload.name, "backend": backend, "strategy": strategy}
        ok, reason = get_backend(backend).available(self.config.device)
        if not ok:
            return dict(base, status="unavailable", error=reason)
        shapes = dynamic.shape_plan(workload, self.config.size, distinct, calls, self.config.seed)
        section.setdefault("plans", {})[workload.name] = shapes
        label = f".dynamic-{strategy}"
        measurement = executor.run_cell(workload, backend, label=label,
                                        dynamic=DynamicSpec(strategy, shapes, steady_calls))
        log = self.specs.log_rel(workload, backend, None, "fp32", label)
        return {**base, **measurement.experiment_record(self.specs.base(workload, backend), log)}


def _transient(record: dict[str, Any]) -> bool:
    """Whether a rerun may end a record otherwise (records before the field: by status)."""
    return bool(record.get("transient", record.get("status") in TRANSIENT_STATUSES))


def _groups(plan: list[tuple]) -> list[list[tuple]]:
    """Consecutive planned cells that share (workload, batch, dtype)."""
    groups: list[list[tuple]] = []
    for cell in plan:
        if groups and (groups[-1][0][0], groups[-1][0][2], groups[-1][0][3]) == (cell[0], cell[2], cell[3]):
            groups[-1].append(cell)
        else:
            groups.append([cell])
    return groups
