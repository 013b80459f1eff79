"""Executors: where the planned cells run. The runner plans and records; an executor
starts the workers, and hands every cell that ends to ``Hooks.record``.

``LocalExecutor`` runs the workers on this machine, one workload's cells at a time and
timed in turns (``compare.harness.interleave``); ``compare.harness.ray_executor.RayExecutor`` runs each
cell as a Ray task on whichever node has the cores.
"""
from __future__ import annotations

import dataclasses
import shutil
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from compare.harness.cells import CellSpecs
from compare.harness.interleave import run_interleaved
from compare.harness.pooling import ProcessPlan, cell_store, pool_processes, run_processes, stretch_shares
from compare.harness.process import WorkerProcess, execute_worker, kill_group
from compare.results.protocol import CellMeasurement, CellSpec, DynamicSpec
from compare.results.schema import Cell, variant_label


class RunInterrupted(Exception):
    """Ctrl-C or SIGTERM: finished cells are saved, the run is marked interrupted."""


@dataclass(frozen=True)
class CellGroup:
    """The cells of one (workload, batch, dtype): timed together, the reference among them."""
    workload: Any
    backends: tuple[str, ...]
    batch: int | None
    dtype: str


@dataclass(frozen=True)
class Hooks:
    """How an executor tells the runner what happens: a cell starts, a worker enters a
    phase, a cell ends (the runner records and saves it)."""
    announce: Callable[[str, str], None]  # (label, backend)
    phase: Callable[[str, str, str], None]  # (workload, backend, phase)
    record: Callable[[Cell], None]
    # A cell measured in part (its first passes): kept and saved, not yet finished.
    update: Callable[[Cell], None] = lambda cell: None
    # A pass beyond --processes: (workload, its number, the cells it is for).
    extra_pass: Callable[[str, int, list[str]], None] = lambda workload, number, backends: None


class Executor(ABC):
    def __init__(self, specs: CellSpecs, hooks: Hooks, output_dir):
        self.specs = specs
        self.config = specs.config
        self.hooks = hooks
        self.output_dir = output_dir

    @abstractmethod
    def run(self, groups: list[CellGroup]) -> None:
        """Run every cell of ``groups``; record each as it ends. Raises RunInterrupted."""

    def kill(self) -> None:
        """Kill whatever workers are running (on an interrupt)."""


@dataclass
class GroupRounds:
    """One group's cells across the passes of a local run: their specs, the results of
    every process so far, and the stretch of interleaved time each process sampled in."""
    group: CellGroup
    specs: dict[str, CellSpec]
    runs: dict[str, list[CellMeasurement]]
    announced: set[str]
    stretches: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    chunks: list[list[str]] = dataclasses.field(default_factory=list)  # the cells of each stretch of a pass
    finished: bool = False  # its cells recorded: no more passes


# Start one more worker of a group only while the memory left holds this many times the
# largest peak of the group's workers already started (a new backend may need more than
# eager; a worker killed for memory costs its cell, and the kernel may pick another).
ROOM_FACTOR = 1.5


def peak_rss_mb(pid: int) -> float:
    """The peak resident memory of a process so far (VmHWM), MB; 0 where it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def available_mb() -> float:
    import psutil

    return psutil.virtual_memory().available / 2**20


def memory_room(started: list[WorkerProcess]) -> bool:
    """Whether memory holds one more worker beside ``started``, which are ready to time."""
    largest = max(peak_rss_mb(w.proc.pid) for w in started)
    return available_mb() > ROOM_FACTOR * largest


class LocalExecutor(Executor):
    """Workers on this machine: a group's cells timed in turns, or one after another.

    Interleaved, a run makes K passes over its groups (``--processes K``): pass r runs the
    r-th process of every cell, one group at a time. So a cell's processes sample K
    stretches of time spread over the whole run, and its interval sees the machine's slow
    swings (two back-to-back runs here moved whole workloads by 5-13 % while the three
    processes of one stretch agreed within 1 %), not only one stretch of them."""

    def __init__(self, specs: CellSpecs, hooks: Hooks, output_dir):
        super().__init__(specs, hooks, output_dir)
        self._workers: list[WorkerProcess] = []
        self._current = None  # the one worker of a cell run on its own

    def run(self, groups: list[CellGroup]) -> None:
        self.specs.reference_dir = tempfile.mkdtemp(prefix="dlcompare-reference-")
        try:
            self._run(groups)
        finally:
            shutil.rmtree(self.specs.reference_dir, ignore_errors=True)
            self.specs.reference_dir = None

    def _run(self, groups: list[CellGroup]) -> None:
        if not self.config.interleave:
            for group in groups:
                for cell in self.run_group(group):
                    self.hooks.record(cell)
            return
        passes = max(1, self.config.processes)
        most = max(passes, self.config.max_processes or passes)
        with cell_store(self.config.cache, most) as store:
            plan = ProcessPlan(passes, store)
            states = [self._group_rounds(group) for group in groups]
            for index in range(most):
                for state in states:
                    if state.finished:
                        continue
                    only = None if index < passes else set(self.still_wide(state))
                    if only is not None:
                        if not only:  # every interval narrow enough: the cells as they stand are final
                            self._finish(state)
                            continue
                        self.hooks.extra_pass(state.group.workload.name, index + 1, sorted(only))
                    self._interleave(state, plan, index, only)
                    if index == most - 1:
                        self._finish(state)
                    else:
                        for cell in self._cells(state, final=False):
                            self.hooks.update(cell)

    def _finish(self, state: GroupRounds) -> None:
        state.finished = True
        for cell in self._cells(state, final=True):
            self.hooks.record(cell)

    def still_wide(self, state: GroupRounds) -> list[str]:
        """The group's cells whose speedup interval, from the processes so far, is noisy (its
        half-width beyond ``NOISY_REL_HALF_WIDTH`` of the speedup) and that have fewer than
        ``max_processes`` processes: the cells another pass is for."""
        from compare.results.derived import fill_speedup

        cells = {c.backend: c for c in self._cells(state, final=True)}
        reference = next((c for c in cells.values() if c.is_reference), None)
        wide = []
        for backend, cell in cells.items():
            if cell.is_reference or cell.status != "ok" or len(state.runs[backend]) >= (self.config.max_processes or 0):
                continue
            fill_speedup(cell, None, reference)
            if cell.noisy:  # its interval's half-width beyond NOISY_REL_HALF_WIDTH of the speedup
                wide.append(backend)
        return wide

    def kill(self) -> None:
        if self._current is not None:
            kill_group(self._current)
        for worker in self._workers:
            kill_group(worker.proc)

    def run_group(self, group: CellGroup) -> Iterator[Cell]:
        """The cells of one group, one after another, each in ``processes`` fresh workers;
        each is yielded as it ends, so the run records it before the next starts (an LLM
        group's cells take minutes each, and an interrupted run keeps those that ended)."""
        workload, batch, dtype = group.workload, group.batch, group.dtype
        for b in group.backends:
            self.hooks.announce(variant_label(workload.name, batch, dtype), b)
            measurement = self.run_cell(workload, b, batch=batch, dtype=dtype)
            yield self.specs.cell(measurement, workload, b, batch, dtype, log=self.specs.log_rel(workload, b, batch, dtype))

    def _group_rounds(self, group: CellGroup) -> GroupRounds:
        state = GroupRounds(group, {}, {b: [] for b in group.backends}, set(), {b: [] for b in group.backends})
        for b in group.backends:
            spec, failure = self.specs.planned(group.workload, b, group.batch, group.dtype, interleave=True)
            if spec is not None:
                state.specs[b] = spec
            elif failure is not None:
                state.runs[b].append(failure)
        return state

    def _cells(self, state: GroupRounds, final: bool) -> list[Cell]:
        """The group's cells from the processes so far. Before the last pass a cell that
        is ok so far is transient: an interrupted run keeps it, and --resume completes it."""
        group, cells = state.group, []
        for b in group.backends:
            pooled = pool_processes(state.runs[b], state.stretches.get(b))
            if not final and pooled.status == "ok":
                pooled = dataclasses.replace(pooled, transient=True)
            cells.append(self.specs.cell(pooled, group.workload, b, group.batch, group.dtype,
                                         log=self.specs.log_rel(group.workload, b, group.batch, group.dtype)))
        return cells

    def _interleave(self, state: GroupRounds, plan: ProcessPlan, index: int, only: set[str] | None = None) -> None:
        """Pass ``index`` of one group: one process of every cell still ok (of ``only``'s, in a
        pass beyond --processes), timed in turns, with the eager-only reference's processes
        among them. After the first pass, the workers import at once and compile in turn.
        Where memory cannot hold every worker of the group at once (``room``), the first pass
        times them in several stretches, each with eager-only processes of its own, and
        later passes keep those stretches."""
        group, rounds = state.group, plan.count
        going = [b for b in group.backends if b in state.specs and all(r.status == "ok" for r in state.runs[b])
                 and (only is None or b in only or state.specs[b].is_reference)]
        if not going:
            return
        specs = {b: dataclasses.replace(plan.spec(state.specs[b], index), await_compile=index > 0) for b in going}
        reference = next((b for b in going if specs[b].is_reference), None)
        cells = [b for b in going if b != reference]
        chunks = [[b for b in chunk if b in cells] for chunk in state.chunks] if index > 0 and state.chunks else [cells]
        chunks = [chunk for chunk in chunks if chunk] or [[]]  # a stretch whose cells all failed: none; eager alone: one
        ref_members = [reference] * self._processes_per_round(specs[reference], group.backends, rounds) if reference else []
        max_rounds = specs[going[0]].timing.max_samples  # the same for every cell of the run
        stretch, first_chunks = 0, []
        while chunks:
            chunk = chunks.pop(0)
            members = ref_members + chunk
            deferred: list[int] = []
            starts = [self._starter(specs[b], group, b, index, state.announced) for b in members]
            ended = stretch_shares(run_interleaved(starts, members, reference, self.config.timeout_s, max_rounds,
                                                   on_worker=self._set_worker, concurrent_imports=index > 0,
                                                   room=memory_room if index == 0 else None, deferred=deferred))
            left = [members[i] for i in deferred if members[i] != reference]
            if left:
                chunks.insert(0, left)
            first_chunks.append([b for b in chunk if b not in left])
            for b, result in zip(members, ended):
                if result is not None:
                    state.runs[b].append(result)
                    state.stretches[b].append(f"{index}.{stretch}")
            stretch += 1
        if index == 0:
            state.chunks = first_chunks

    def _processes_per_round(self, spec: CellSpec, backends, rounds: int) -> int:
        # The reference runs in several processes even when the cells run in one: each
        # process has an offset of its own (±5 % here), and one offset in the reference
        # would shift every cell's comparison with it. Alone, it is compared with nothing.
        if not spec.is_reference or len(backends) == 1:
            return 1
        return max(1, -(-self.config.reference_processes // rounds))

    def _starter(self, spec: CellSpec, group: CellGroup, backend: str, index: int, announced: set[str]):
        workload = group.workload
        on_phase = self._phase_reporter(workload.name, backend, index)
        log = self.output_dir / self.specs.log_rel(workload, backend, group.batch, group.dtype)

        def start() -> WorkerProcess:
            if backend not in announced:
                announced.add(backend)
                self.hooks.announce(variant_label(workload.name, group.batch, group.dtype), backend)
            return WorkerProcess(spec, log, self.specs.env(), on_phase=on_phase,
                                 keep_work_dir=self.config.keep_work_dirs)
        return start

    def _phase_reporter(self, workload_name: str, backend: str, index: int, count: int | None = None):
        count = count or max(1, self.config.processes, self.config.max_processes or 0)

        def on_phase(phase: str) -> None:
            self.hooks.phase(workload_name, backend, phase if count == 1 else f"process {index + 1}/{count}: {phase}")
        return on_phase

    def _set_worker(self, worker) -> None:
        if worker is None:
            self._workers = []
        else:
            self._workers.append(worker)

    def run_cell(self, workload, backend: str, label: str = "", batch: int | None = None, dtype: str = "fp32",
                 dynamic: DynamicSpec | None = None) -> CellMeasurement:
        """One cell in ``processes`` fresh workers, one after another, pooled (never raises
        for anything a worker does: crashes, hangs and bad results become a status). An
        experiment (``dynamic``) runs in one worker."""
        cfg = self.config
        spec, failure = self.specs.planned(workload, backend, batch, dtype, dynamic=dynamic)
        if spec is None:
            assert failure is not None  # planned gives one or the other
            return failure
        log_rel = self.specs.log_rel(workload, backend, batch, dtype, label)
        count = 1 if dynamic else max(1, cfg.processes)

        def run_one(worker_spec: CellSpec, index: int) -> CellMeasurement:
            result = execute_worker(worker_spec, self.output_dir / log_rel, cfg.timeout_s, self.specs.env(),
                                    on_phase=self._phase_reporter(workload.name, backend, index, count),
                                    on_start=self._set_current, keep_work_dir=cfg.keep_work_dirs)
            self._current = None
            return result
        return run_processes(spec, count, run_one)

    def _set_current(self, proc) -> None:
        self._current = proc
