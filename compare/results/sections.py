"""A cell's figures beyond its core, in typed sections, each owned by what produces it.

``Cell`` keeps identity, status, compile, latency, speedup and error; everything else is
one of these sections. Each keeps the flat field names results files had up to schema 8,
so an old file's flat cell (and a worker's flat ``CellMeasurement``) is routed into its
sections by name (``SECTION_OF``), and the CSV's columns keep their names.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from compare.measure.latency import LatencyStats


@dataclass
class Numerics:
    """Outputs against eager (measure.numerics, measure.accuracy)."""

    max_abs_err: float | None = None  # vs eager fp32
    max_rel_err: float | None = None
    max_abs_err_fp64: float | None = None  # vs eager in float64
    max_rel_err_fp64: float | None = None
    eager_max_abs_err_fp64: float | None = None  # eager fp32's own error vs float64
    numerics_ok: bool | None = None
    numerics_error: str | None = None
    numerics_draws: int | None = None  # input draws checked; errors are the worst over them
    numerics_after_timing: dict[str, Any] | None = None  # the outputs re-checked after the timed calls
    tolerance: dict[str, float] | None = None


@dataclass
class Costs:
    """What a backend costs before its first result, and when that is paid back."""

    compile_phases: dict[str, float] = field(default_factory=dict)
    torch_import_s: float | None = None  # importing torch, torch.export and dynamo in the worker (every cell pays it)
    import_s: float | None = None  # the backend's own modules (not part of compile_s)
    time_to_first_result_s: float | None = None  # torch import + import + compile (first call included)
    tuning_s: float | None = None  # seconds of tuning behind the log used (tuned backends; None: unknown)
    cache: str | None = None  # "cold", "hit", "miss", "bypass" (the backend declined to cache)
    warm_start_s: float | None = None  # median compile s of the processes that loaded the first one's artifact
    warm_cache: str | None = None  # what their caches said ("hit"; "bypass": the backend rebuilt)
    break_even_calls: float | None = None  # everything paid (tuning included); null: never (derived)
    break_even_calls_excl_tuning: float | None = None  # tuned backends: compile of this run only (derived)
    break_even_ci: list[float] | None = None  # 95% interval of break_even_calls (derived)
    break_even_note: str | None = None
    amortization: list[dict[str, float]] | None = None  # n -> cumulative s, compiled vs eager


@dataclass
class Memory:
    """Resident memory of the worker (measure.memory)."""

    peak_rss_mb: float | None = None  # the worker's own high-water mark
    load_mb: float | None = None  # RSS added by importing the backend
    compile_peak_mb: float | None = None  # worker + child processes through compile, above the loaded RSS
    compile_children_peak_mb: float | None = None  # child processes alone (compile workers, builders)
    steady_state_mb: float | None = None  # resident after warm-up (heap trimmed), above the loaded RSS
    call_peak_mb: float | None = None  # transient peak of one steady call


@dataclass
class Spread:
    """How the speedup spreads over the cell's processes, and the reference's drift."""

    process_samples: list[int] | None = None  # alternated pairs per worker process, in order
    processes: list[dict[str, Any]] | None = None  # per process: medians, round s, compile s, cache, wall s
    speedup_processes: list[float] | None = None  # each process's own speedup (derived)
    interval: dict[str, Any] | None = None  # how speedup_ci was made: processes, block rounds, tail (derived)
    eager_only_ms: float | None = None  # median of the workload's reference-only cell (derived)
    reference_deviation: float | None = None  # in-cell reference median / eager_only_ms - 1 (derived)


@dataclass
class Int8:
    """int8 cells against fp32 eager, timed in the same rounds."""

    fp32_eager_latency: LatencyStats | None = None
    # over the draws: reference, draws, max_abs, rel_err, cosine_min, top1_agreement and
    # top1_rows for logits, judged by the int8 tolerance
    accuracy: dict[str, Any] | None = None
    speedup_vs_fp32: float | None = None  # fp32 eager median / this median (derived)
    speedup_vs_fp32_ci: list[float] | None = None  # resampled as speedup_ci (derived)
    break_even_vs_fp32_calls: float | None = None  # calls until compile and quantize are paid back (derived)


@dataclass
class ScenarioFigures:
    """What a scenario other than back-to-back measured (each key filled by its scenario
    module in compare/scenarios, or by worker.decode)."""

    # single-stream: per-request percentiles (ms), {"backend": {p50, p90, p99, p99.9, max, n},
    # "eager": {...}}, and eager's p99 / the backend's {"q", "ratio", "ci"} (derived)
    request_latency_ms: dict[str, Any] | None = None
    tail_speedup: dict[str, Any] | None = None
    # --suite llm: greedy generation with a static KV cache (worker.decode); the cell's
    # latency is then one whole generation
    decode: dict[str, Any] | None = None
    # a throughput scenario: inferences/s with the backend's own streams, interval,
    # samples/s, and the in-cell eager's under "eager" (derived by its scenario)
    throughput: dict[str, Any] | None = None
    # server: LoadGen's search for the highest QPS within the p99 bound (measure.loadgen)
    server: dict[str, Any] | None = None
    # {scenario name: its figures}, for a scenario module whose figures have no field above
    # (an added scenario records and derives them there, with no change to the records)
    scenario_extra: dict[str, Any] | None = None


@dataclass
class Instruments:
    """What --explain, --roofline and --crosscheck add, and the libraries behind the kernels."""

    work: dict[str, Any] | None = None  # counted flops and minimum bytes of the workload
    roofline: dict[str, Any] | None = None  # achieved GFLOP/s, GB/s, fraction of the bound
    profile: dict[str, Any] | None = None  # the backend's own kernel profile, or why there is none
    # {tool, median_ms, ratio (the tool's median / this process's), processes, flagged}, or {unavailable: why}
    crosscheck: dict[str, Any] | None = None
    gemm_library: dict[str, str] | None = None  # {"gemm": library, "conv": library} (adapters/libraries.py)


@dataclass
class Conditions:
    """How the cell ran: the backend's settings, the process, its log."""

    settings: dict[str, Any] = field(default_factory=dict)  # how the backend was configured
    allocator: str | None = None  # the malloc the worker ran with, as it saw it
    backend_versions: dict[str, str] = field(default_factory=dict)
    workload_key: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    wall_s: float | None = None  # whole worker(s), spawn to exit
    log: str | None = None  # worker log, relative to the run folder


SECTIONS: dict[str, type] = {"numerics": Numerics, "costs": Costs, "memory": Memory, "spread": Spread,
                             "int8": Int8, "scenario": ScenarioFigures, "instruments": Instruments,
                             "conditions": Conditions}
# a flat field's section, by its name (old files, worker measurements, tests)
SECTION_OF: dict[str, str] = {f.name: name for name, cls in SECTIONS.items() for f in dataclasses.fields(cls)}


def route_flat(flat: dict[str, Any]) -> dict[str, Any]:
    """Cell keyword arguments from flat ones: each section's fields gathered under its name."""
    kwargs: dict[str, Any] = {}
    for key, value in flat.items():
        section = SECTION_OF.get(key)
        if section is None:
            kwargs[key] = value
        else:
            kwargs.setdefault(section, {})[key] = value
    return kwargs


def flatten(cell_dict: dict[str, Any]) -> dict[str, Any]:
    """A cell's dict with its sections' fields back at the top level (a field given flat
    wins: a migration step may have rewritten it)."""
    flat: dict[str, Any] = {}
    for name in SECTIONS:
        flat.update(cell_dict.get(name) or {})
    flat.update({k: v for k, v in cell_dict.items() if k not in SECTIONS})
    return flat
