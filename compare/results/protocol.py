"""What the parent and a worker say to each other, and how a cell ends.

The worker (``python -m compare.worker SPEC RESULT``) gets its ``CellSpec`` as a JSON file,
reports events as ``@@dlcompare {json}`` lines on stdout, takes timing commands as JSON
lines on stdin when its cells are interleaved, and writes its ``CellMeasurement`` to RESULT.
Both are frozen, typed records whose JSON names every field: a field one side does not
know, or one it misses, is an error that names it, so the two sides cannot drift apart
quietly. Both sides import this module and nothing else of each other, so the parent never
loads torch or a compiler to speak with a worker.

Events (worker -> parent): ``{"phase": name}``, ``{"imported": true}`` when its imports are
done and it waits to compile (``CellSpec.await_compile``), ``{"ready": {"round_s": s}}`` once it
can time, ``{"slice": {"rounds": n, "done": bool, "round_s": s}}`` after each slice.
Commands (parent -> worker): ``{"compile": true}``, ``{"rounds": n}``, ``{"finish": true}``.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from compare.measure.latency import LatencyStats, RecordError, checked_fields
from compare.measure.timing import TimingConfig
from compare.results.roles import REFERENCE

EVENT_PREFIX = "@@dlcompare "

# How a cell ended. ``transient`` (a field of its own) says whether a rerun may end it
# differently because the machine, not the code, was at fault: --resume runs it again.
STATUSES = ("ok", "failed", "timeout", "out_of_memory", "unavailable")
TRANSIENT_STATUSES = ("timeout", "out_of_memory")
OOM_MARKERS = ("can't allocate memory", "Cannot allocate memory", "std::bad_alloc", "out of memory",
               "OutOfMemoryError", "MemoryError", "failed to allocate")


def encode_event(**event: Any) -> str:
    return EVENT_PREFIX + json.dumps(event) + "\n"


def decode_event(line: str) -> dict[str, Any] | None:
    """The event on one line of a worker's stdout; None for any other output."""
    if not line.startswith(EVENT_PREFIX):
        return None
    try:
        event = json.loads(line[len(EVENT_PREFIX):])
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) else None


def rounds_command(rounds: int) -> dict[str, Any]:
    return {"rounds": int(rounds)}


def compile_command() -> dict[str, Any]:
    return {"compile": True}


def finish_command() -> dict[str, Any]:
    return {"finish": True}


def encode_command(command: dict[str, Any]) -> str:
    return json.dumps(command) + "\n"


def looks_out_of_memory(text: str) -> bool:
    return any(marker in text for marker in OOM_MARKERS)


@dataclass(frozen=True)
class DynamicSpec:
    """The dynamic-shape experiment's part of a spec (``compare.experiments.dynamic``): the
    strategy, the shape plan (``dynamic.shape_plan``) and the steady calls per size."""
    strategy: str
    plan: dict[str, Any]
    steady_calls: int

    @classmethod
    def from_dict(cls, data: Any) -> "DynamicSpec":
        return cls(**checked_fields(cls, data, "the spec's dynamic"))


@dataclass(frozen=True)
class CellSpec:
    """Everything a worker needs to measure one cell (or run one experiment in one cell's
    setting). Built by ``compare.harness.cells.CellSpecs`` from the run's config, which holds
    the defaults of the fields without one here; the fields with a default are the
    harness's choices per worker (interleaving, the process plan, the experiment)."""
    workload: str
    backend: str
    role: str  # roles.REFERENCE or roles.CANDIDATE
    workload_key: str  # the cache key of the model at this size, batch and dtype
    workload_files: tuple[str, ...]  # user workload files, resolved
    size: str
    batch: int | None  # None: the workload's own batch at this size
    dtype: str
    device: str
    threads: int
    seed: int
    timing: TimingConfig
    options: dict[str, Any]  # the backends' options (each reads its own)
    cache: str  # "cold" or "warm"
    cache_root: str
    memory_limit_mb: int | None
    numerics_draws: int
    calibration_batches: int  # --dtype int8: seeded batches every backend's quantizer calibrates on
    explain: bool  # profile with the backend's own instrument after timing
    crosscheck: bool  # re-time with the backend's own benchmark tool after timing
    affinity: tuple[int, ...] | None  # the CPUs the worker pins itself to
    interleave: bool = False  # timing in slices the parent asks for (compare.harness.interleave)
    await_compile: bool = False  # report the imports done, then wait for the compile command
    process_index: int = 0  # which of the cell's processes (compare.harness.pooling.ProcessPlan)
    count_work: bool = True  # count the roofline's work and read the GEMM libraries (the first process)
    store_root: str | None = None  # the store a cold cell's processes share
    fresh_store: bool = False  # the store was made empty for this process: its build is cold
    # A folder the run's workers share on this machine: the float64 reference outputs of a
    # workload, computed by its first worker and read by the others (compare.worker.steps)
    reference_dir: str | None = None
    work_dir: str | None = None  # the worker's own folder (set when it is started)
    dynamic: DynamicSpec | None = None  # the dynamic-shape experiment instead of a cell
    scenario: str = "back-to-back"  # how calls are issued (--scenario: compare.scenarios)
    scenario_options: dict[str, Any] = field(default_factory=dict)  # the run's (Scenario.option_values)
    prompt_len: int | None = None  # decode workloads: --prompt-len (None: the workload's own)
    gen_len: int | None = None  # decode workloads: --gen-len
    coverage_only: bool = False  # --coverage-only: compile, one call, numerics; no timing

    @property
    def is_reference(self) -> bool:
        return self.role == REFERENCE

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: Any) -> "CellSpec":
        fields = checked_fields(cls, data, "the cell spec")
        affinity = fields["affinity"]
        return cls(**{**fields,
                      "workload_files": tuple(fields["workload_files"]),
                      "affinity": None if affinity is None else tuple(affinity),
                      "timing": TimingConfig(**checked_fields(TimingConfig, fields["timing"], "the spec's timing")),
                      "dynamic": None if fields["dynamic"] is None else DynamicSpec.from_dict(fields["dynamic"])})

    @classmethod
    def from_json(cls, text: str) -> "CellSpec":
        return cls.from_dict(json.loads(text))


@dataclass(frozen=True)
class CellMeasurement:
    """What a worker measured in one cell, or how it ended without a result (``ended``),
    then what the parent adds: how the process went (``wall_s``, ``started_at``) and, for a
    cell of several processes, how they pooled (``compare.harness.pooling``). The cell's
    identity is the spec's; ``compare.results.schema.Cell.from_measurement`` builds the
    cell. Figures are those of ``Cell`` of the same name, except ``PROCESS_ONLY``."""
    status: str  # STATUSES
    error: str | None = None
    transient: bool = False
    # the backend and how it ran
    backend_versions: dict[str, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    allocator: str | None = None
    # compile
    torch_import_s: float | None = None
    import_s: float | None = None
    compile_phases: dict[str, float] = field(default_factory=dict)
    compile_s: float | None = None
    time_to_first_result_s: float | None = None
    tuning_s: float | None = None
    cache: str | None = None
    # memory
    load_mb: float | None = None
    peak_rss_mb: float | None = None
    compile_peak_mb: float | None = None
    compile_children_peak_mb: float | None = None
    steady_state_mb: float | None = None
    call_peak_mb: float | None = None
    # numerics
    numerics_ok: bool | None = None
    numerics_error: str | None = None
    numerics_draws: int | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    tolerance: dict[str, float] | None = None
    max_abs_err_fp64: float | None = None
    max_rel_err_fp64: float | None = None
    eager_max_abs_err_fp64: float | None = None
    numerics_after_timing: dict[str, Any] | None = None
    accuracy: dict[str, Any] | None = None  # int8 cells: against fp32 eager (compare.measure.accuracy)
    work: dict[str, Any] | None = None
    # timing
    latency: LatencyStats | None = None
    eager_latency: LatencyStats | None = None
    fp32_eager_latency: LatencyStats | None = None  # int8 cells: fp32 eager, timed in the same rounds
    round_s: float | None = None  # seconds of one alternated round (process-only)
    # the backend's own instruments, and what it reported
    profile: dict[str, Any] | None = None
    crosscheck: dict[str, Any] | None = None
    gemm_library: dict[str, str] | None = None
    server: dict[str, Any] | None = None  # --scenario server: LoadGen's search (compare.measure.loadgen)
    scenario_extra: dict[str, Any] | None = None  # {scenario name: figures} of a scenario without fields here
    info: dict[str, Any] = field(default_factory=dict)
    # --suite llm: the greedy generation's record (compare.worker.decode.decode_record)
    decode: dict[str, Any] | None = None
    experiment: dict[str, Any] | None = None  # an experiment's record (process-only)
    worker_s: float | None = None  # the worker's own seconds, import to result (process-only)
    # the parent: the process, seen from outside
    wall_s: float | None = None  # spawn to exit (summed over the cell's processes)
    started_at: float | None = None  # wall clock at spawn (process-only)
    # seconds between the worker's phase events, by phase (process-only): where its wall went
    phase_s: dict[str, float] | None = None
    # its share of its interleaved stretch's span, first spawn to last exit (process-only;
    # compare.harness.pooling.stretch_shares): what the run's wall spent on it
    share_s: float | None = None
    workload_key: str | None = None
    # the parent: the cell's processes pooled
    process_samples: list[int] | None = None
    processes: list[dict[str, Any]] | None = None
    warm_start_s: float | None = None
    warm_cache: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise RecordError(f"the measurement has unknown status {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: Any) -> "CellMeasurement":
        fields = checked_fields(cls, data, "the measurement")
        stats = {name: LatencyStats.from_json(fields[name], f"the measurement's {name}") for name in STATS_FIELDS}
        return cls(**{**fields, **stats})

    @classmethod
    def from_json(cls, text: str) -> "CellMeasurement":
        return cls.from_dict(json.loads(text))

    def experiment_record(self, identity: dict[str, Any], log: str | None) -> dict[str, Any]:
        """An experiment's record as results keep it: the cell's identity, the record (or how
        the worker ended), the process's figures and its log."""
        body = self.experiment if self.experiment is not None else {
            "status": self.status, "error": self.error, "transient": self.transient}
        return {**identity, **body, "wall_s": self.wall_s, "workload_key": self.workload_key,
                "started_at": self.started_at, "log": log}


@dataclass(frozen=True)
class BisectSpec:
    """What the bisect worker (``python -m compare.experiments.bisect SPEC``) needs: the
    cell's spec as its run planned it, its label, where to write, and the factor over
    eager's own error that makes an op bad (None: the bisect's default)."""
    cell: CellSpec
    label: str
    out_dir: str
    factor: float | None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> "BisectSpec":
        fields = checked_fields(cls, json.loads(text), "the bisect spec")
        return cls(**{**fields, "cell": CellSpec.from_dict(fields["cell"])})


# The latency records of a measurement and of a cell.
STATS_FIELDS = ("latency", "eager_latency", "fp32_eager_latency")
# Measurement fields that describe a worker process, not the cell: ``Cell`` has none of them.
PROCESS_ONLY = ("round_s", "experiment", "worker_s", "started_at", "phase_s", "share_s")


def ended(status: str, error: str, transient: bool | None = None, info: dict[str, Any] | None = None) -> CellMeasurement:
    """A cell that ended without a result. Timeouts and out-of-memory kills are transient
    unless said otherwise; so is a worker killed from outside or lost with its node (the
    caller says so). ``info``: what the worker knew, such as the phase it failed in."""
    return CellMeasurement(status=status, error=error, info=info or {},
                           transient=status in TRANSIENT_STATUSES if transient is None else transient)
