"""Results as plain data: dataclasses that round-trip through JSON and CSV.

``results.json`` is the contract every later command reads (reports, diffs,
resume). Bump ``SCHEMA_VERSION`` when a field changes meaning; readers refuse
versions they do not know instead of guessing.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compare.measure.latency import LatencyStats, RecordError
from compare.results import extensions
from compare.results.files import atomic_write_text
from compare.results.protocol import PROCESS_ONLY, STATS_FIELDS, STATUSES, TRANSIENT_STATUSES, CellMeasurement
from compare.results.roles import REFERENCE, REFERENCE_SIDE, ROLES, role_of

SCHEMA_VERSION = 8
# Versions this dlcompare reads; older ones are migrated on load (see ``migrate``).
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8)
_INF = "__dlcompare_inf__"  # stands in for infinity until the text is written (see dumps)


class ResultsError(ValueError):
    """A results file cannot be read; the message says which and why in one line."""


def variant_label(workload: str, batch: int | None, dtype: str = "fp32") -> str:
    parts = ([f"b{batch}"] if batch is not None else []) + ([dtype] if dtype != "fp32" else [])
    return f"{workload}[{','.join(parts)}]" if parts else workload


@dataclass
class Cell:
    """One (workload, backend) measurement."""

    workload: str
    backend: str
    status: str  # protocol.STATUSES
    transient: bool = False  # a rerun may end it otherwise (timeout, OOM, killed): --resume reruns it
    role: str | None = None  # roles.REFERENCE or roles.CANDIDATE; None: from the backend (the default reference)
    size: str = "default"
    device: str = "cpu"
    batch: int | None = None  # --batch value; None: the workload's own batch at this size
    dtype: str = "fp32"  # precision of weights and inputs (--dtype)
    error: str | None = None
    compile_s: float | None = None
    compile_phases: dict[str, float] = field(default_factory=dict)
    latency: LatencyStats | None = None  # the backend's per-call latency (ms)
    eager_latency: LatencyStats | None = None  # eager, timed alternately in the same worker(s)
    # int8 cells: fp32 eager, timed in the same rounds as the cell and its int8 eager reference
    fp32_eager_latency: LatencyStats | None = None
    eager_only_ms: float | None = None  # median of the workload's eager-only cell (derived)
    reference_deviation: float | None = None  # eager_median_ms / eager_only_ms - 1 (derived)
    speedup: float | None = None  # eager median / this median (derived)
    speedup_ci: list[float] | None = None  # paired-bootstrap 95% interval of the speedup (derived)
    noisy: bool | None = None
    process_samples: list[int] | None = None  # alternated pairs per worker process, in order
    processes: list[dict[str, Any]] | None = None  # per process: medians, round s, compile s, cache, wall s
    speedup_processes: list[float] | None = None  # each process's own speedup: the spread beside the interval (derived)
    interval: dict[str, Any] | None = None  # how speedup_ci was made: processes, block rounds, tail (derived)
    # --scenario single-stream: per-request percentiles (ms) of the backend and of the in-cell
    # eager, {"backend": {p50, p90, p99, p99.9, max, n}, "eager": {...}} (derived)
    request_latency_ms: dict[str, Any] | None = None
    # --scenario single-stream: eager's p99 request / the backend's, {"q", "ratio", "ci"}; the
    # interval resampled as the speedup's (derived; None under 100 requests)
    tail_speedup: dict[str, Any] | None = None
    # --suite llm: greedy generation with a static KV cache. Measured: prompt_len, new_tokens,
    # max_len, batch, cache ("static-padded"), compiles, recompiles, token_ids_agree,
    # first_divergent_step, token_ids, eager_token_ids, samples {backend, eager: {ttft_ms,
    # step_ms}}; derived: ttft_ms, tpot_ms {p50, p99, n}, tokens_per_s, and eager's as "eager".
    # The cell's latency is then one whole generation.
    decode: dict[str, Any] | None = None
    # a throughput scenario: inferences/s of the backend with its own streams, its 95 % interval
    # and samples/s at the stated batch, with the stream setting it ran with, and the same
    # of the in-cell eager under "eager" (derived by its scenario: compare.scenarios)
    throughput: dict[str, Any] | None = None
    warm_start_s: float | None = None  # median compile s of the processes that loaded the first one's artifact
    warm_cache: str | None = None  # what their caches said ("hit"; "bypass": the backend rebuilt)
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
    # int8 cells: against fp32 eager over the draws (reference, draws, max_abs, rel_err,
    # cosine_min, top1_agreement and top1_rows for logits), judged by the int8 tolerance
    accuracy: dict[str, Any] | None = None
    speedup_vs_fp32: float | None = None  # int8 cells: fp32 eager median / this median (derived)
    speedup_vs_fp32_ci: list[float] | None = None  # its 95% interval, resampled as speedup_ci (derived)
    break_even_vs_fp32_calls: float | None = None  # calls until compile and quantize are paid back vs fp32 eager (derived)
    torch_import_s: float | None = None  # importing torch, torch.export and dynamo in the worker (every cell pays it)
    import_s: float | None = None  # the backend's own modules (not part of compile_s)
    time_to_first_result_s: float | None = None  # torch import + import + compile (first call included)
    tuning_s: float | None = None  # seconds of tuning behind the log used (tuned backends; None: unknown)
    break_even_calls: float | None = None  # everything paid (tuning included); null: never (derived)
    break_even_calls_excl_tuning: float | None = None  # tuned backends: compile of this run only (derived)
    break_even_ci: list[float] | None = None  # 95% interval of break_even_calls (derived)
    break_even_note: str | None = None
    peak_rss_mb: float | None = None  # the worker's own high-water mark
    load_mb: float | None = None  # RSS added by importing the backend
    compile_peak_mb: float | None = None  # worker + child processes through compile, above the loaded RSS
    compile_children_peak_mb: float | None = None  # child processes alone (compile workers, builders)
    steady_state_mb: float | None = None  # resident after warm-up (heap trimmed), above the loaded RSS
    call_peak_mb: float | None = None  # transient peak of one steady call
    amortization: list[dict[str, float]] | None = None  # n -> cumulative s, compiled vs eager
    work: dict[str, Any] | None = None  # counted flops and minimum bytes of the workload
    roofline: dict[str, Any] | None = None  # achieved GFLOP/s, GB/s, fraction of the bound
    profile: dict[str, Any] | None = None  # --explain: the backend's own kernel profile, or why there is none
    # --crosscheck: {tool, median_ms, ratio (the tool's median / this process's), processes,
    # flagged (beyond CROSSCHECK_TOLERANCE)}, or {unavailable: why}
    crosscheck: dict[str, Any] | None = None
    # {"gemm": library, "conv": library}: MKL, oneDNN, MLAS, OpenVINO's kernels, TVM's or
    # IREE's own code (adapters/libraries.py); {} when the graph has neither
    gemm_library: dict[str, str] | None = None
    # --scenario server: LoadGen's search for the highest QPS whose p99 meets the bound, for the
    # backend and for eager in the same worker: {loadgen_version, p99_bound_ms, bound_rule,
    # max_qps, p99_at_max_ms, own_p99_at_max_ms, capacity_qps, loadgen_runs: [...], eager:
    # {...}, qps_ratio_vs_eager} (compare.measure.loadgen; the first process's)
    server: dict[str, Any] | None = None
    threads: int | None = None
    cache: str | None = None  # "cold", "hit", "miss", "bypass" (the backend declined to cache)
    settings: dict[str, Any] = field(default_factory=dict)  # how the backend was configured
    allocator: str | None = None  # the malloc the worker ran with, as it saw it
    backend_versions: dict[str, str] = field(default_factory=dict)
    workload_key: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    wall_s: float | None = None  # whole worker(s), spawn to exit
    log: str | None = None  # worker log, relative to the run folder

    def __post_init__(self) -> None:
        if self.role is None:
            self.role = role_of(self.backend, self.dtype)

    @property
    def is_reference(self) -> bool:
        """The cell every other of its workload is compared with."""
        return self.role == REFERENCE

    @property
    def key(self) -> tuple:
        return (self.workload, self.backend, self.size, self.device, self.batch, self.dtype)

    @property
    def latency_median_ms(self) -> float | None:
        return self.latency.median if self.latency else None

    @property
    def eager_median_ms(self) -> float | None:
        """The in-cell eager reference: the median of eager timed alternately with this backend."""
        return self.eager_latency.median if self.eager_latency else None

    @property
    def label(self) -> str:
        """The workload as tables show it: ``resnet``, ``resnet[b8]``, ``resnet[b8,bf16]``."""
        return variant_label(self.workload, self.batch, self.dtype)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Cell":
        names = {f.name for f in dataclasses.fields(cls)}
        missing = {"workload", "backend", "status"} - set(data)
        if missing:
            raise ResultsError(f"cell is missing field(s) {', '.join(sorted(missing))}")
        unknown = sorted(set(data) - names)
        if unknown:  # a misspelt field must not quietly become None
            raise ResultsError(f"cell {data['workload']}/{data['backend']} has unknown field(s) {', '.join(unknown)}")
        kwargs = dict(data)
        try:
            for stats_field in STATS_FIELDS:
                kwargs[stats_field] = LatencyStats.from_json(kwargs.get(stats_field), stats_field)
        except RecordError as exc:
            raise ResultsError(f"cell {data['workload']}/{data['backend']}: {exc}") from None
        if kwargs["status"] not in STATUSES:
            raise ResultsError(f"cell {data['workload']}/{data['backend']} has unknown status {kwargs['status']!r}")
        if kwargs.get("role") not in (None, *ROLES):
            raise ResultsError(f"cell {data['workload']}/{data['backend']} has unknown role {kwargs['role']!r}")
        return cls(**kwargs)

    @classmethod
    def from_measurement(cls, measurement: CellMeasurement, *, workload: str, backend: str, role: str, size: str,
                         device: str, threads: int | None, batch: int | None, dtype: str,
                         log: str | None = None) -> "Cell":
        """The cell of what its worker(s) measured, with its identity and role (the spec's)."""
        figures = {k: v for k, v in vars(measurement).items() if k not in PROCESS_ONLY}
        return cls(workload=workload, backend=backend, role=role, size=size, device=device, threads=threads,
                   batch=batch, dtype=dtype, log=log, **figures)


@dataclass
class RunResults:
    environment: dict[str, Any]
    config: dict[str, Any]
    cells: list[Cell] = field(default_factory=list)
    run_id: str = ""
    state: str = "running"  # "running", "complete", "interrupted"
    started: str = ""
    finished: str | None = None
    experiments: dict[str, Any] = field(default_factory=dict)  # e.g. roofline ceilings, dynamic shapes
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "run_id": self.run_id,
            "state": self.state,
            "started": self.started,
            "finished": self.finished,
            "environment": self.environment,
            "config": self.config,
            "cells": [c.to_dict() for c in self.cells],
            "experiments": self.experiments,
        }

    def to_pandas(self):
        """One row per cell: the columns of results.csv (``cell_row``)."""
        return cells_frame(self)

    def upsert(self, cell: Cell) -> None:
        """Replace the cell with the same key, or append."""
        for i, existing in enumerate(self.cells):
            if existing.key == cell.key:
                self.cells[i] = cell
                return
        self.cells.append(cell)

    def cell(self, workload: str, backend: str, batch: int | None = None, dtype: str = "fp32") -> Cell | None:
        return next((c for c in self.cells if c.workload == workload and c.backend == backend
                     and c.batch == batch and c.dtype == dtype), None)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "results") -> "RunResults":
        if not isinstance(data, dict):
            raise ResultsError(f"{source}: top level is not a JSON object")
        version = data.get("schema_version")
        if version not in READABLE_VERSIONS:
            raise ResultsError(
                f"{source}: schema_version {version!r} is not supported (this dlcompare reads "
                f"{', '.join(map(str, READABLE_VERSIONS))})"
            )
        data = migrate(data)
        for key in ("environment", "cells"):
            if key not in data:
                raise ResultsError(f"{source}: missing top-level field {key!r}")
        if not isinstance(data["cells"], list):
            raise ResultsError(f"{source}: 'cells' is not a list")
        try:
            cells = [Cell.from_dict(c) for c in data["cells"]]
        except ResultsError as exc:
            raise ResultsError(f"{source}: {exc}") from None
        except (TypeError, AttributeError) as exc:
            raise ResultsError(f"{source}: malformed cell ({exc})") from None
        return cls(
            environment=data["environment"],
            config=data.get("config", {}),
            cells=cells,
            run_id=data.get("run_id", ""),
            state=data.get("state", "complete"),
            started=data.get("started", ""),
            finished=data.get("finished"),
            experiments=data.get("experiments") or {},
        )

    @classmethod
    def load(cls, path: str | Path) -> "RunResults":
        path = Path(path)
        if path.is_dir():
            path = path / "results.json"
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise ResultsError(f"{path}: no such file") from None
        except OSError as exc:
            raise ResultsError(f"{path}: cannot be read ({exc.strerror})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ResultsError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg}); the file is truncated or edited") from None
        return cls.from_dict(data, source=str(path))


def cell_row(cell: Cell) -> dict[str, Any]:
    """One flat row per cell: the CSV's columns."""
    lat = cell.latency
    row: dict[str, Any] = {
        "workload": cell.workload,
        "backend": cell.backend,
        "size": cell.size,
        "batch": cell.batch,
        "dtype": cell.dtype,
        "device": cell.device,
        "status": cell.status,
        "error": cell.error,
        "import_s": cell.import_s,
        "compile_s": cell.compile_s,
        "time_to_first_result_s": cell.time_to_first_result_s,
        "tuning_s": cell.tuning_s,
        "latency_ms": lat.median if lat else None,
        "latency_p10_ms": lat.p10 if lat else None,
        "latency_p90_ms": lat.p90 if lat else None,
        "latency_iqr_ms": lat.iqr if lat else None,
        "latency_samples": lat.n if lat else None,
        "calls_per_sample": lat.number if lat else None,
        "processes": len(cell.process_samples or []) or None,
        "eager_latency_ms": cell.eager_median_ms,
        "eager_only_ms": cell.eager_only_ms,
        "reference_deviation": cell.reference_deviation,
        "speedup": cell.speedup,
        "speedup_vs_fp32": cell.speedup_vs_fp32,
        "fp32_eager_latency_ms": cell.fp32_eager_latency.median if cell.fp32_eager_latency else None,
        "int8_cosine_min": (cell.accuracy or {}).get("cosine_min"),
        "int8_rel_err": (cell.accuracy or {}).get("rel_err"),
        "int8_top1_agreement": (cell.accuracy or {}).get("top1_agreement"),
        "speedup_ci_low": cell.speedup_ci[0] if cell.speedup_ci else None,
        "speedup_ci_high": cell.speedup_ci[1] if cell.speedup_ci else None,
        "noisy": cell.noisy,
        "max_abs_err": cell.max_abs_err,
        "max_rel_err": cell.max_rel_err,
        "max_abs_err_fp64": cell.max_abs_err_fp64,
        "eager_max_abs_err_fp64": cell.eager_max_abs_err_fp64,
        "numerics_ok": cell.numerics_ok,
        "break_even_calls": cell.break_even_calls,
        "break_even_calls_excl_tuning": cell.break_even_calls_excl_tuning,
        "break_even_ci_low": cell.break_even_ci[0] if cell.break_even_ci else None,
        "break_even_ci_high": cell.break_even_ci[1] if cell.break_even_ci else None,
        "peak_rss_mb": cell.peak_rss_mb,
        "load_mb": cell.load_mb,
        "compile_peak_mb": cell.compile_peak_mb,
        "steady_state_mb": cell.steady_state_mb,
        "threads": cell.threads,
        "allocator": cell.allocator,
        "cache": cell.cache,
    }
    for scenario_columns in extensions.cell_columns():
        row.update(scenario_columns(cell))
    row.update(decode_columns(cell.decode))
    for phase, seconds in cell.compile_phases.items():
        row[f"phase_{phase}_s"] = seconds
    return row


def decode_columns(decode: dict[str, Any] | None) -> dict[str, Any]:
    """--suite llm: the decode figures as CSV columns (none for other cells)."""
    if not decode:
        return {}
    row = {f"decode_{name}": decode.get(name) for name in ("prompt_len", "new_tokens", "max_len", "cache",
                                                            "recompiles", "token_ids_agree", "first_divergent_step")}
    for prefix, side in (("decode", decode), ("decode_eager", decode.get(REFERENCE_SIDE) or {})):
        tpot = side.get("tpot_ms") or {}
        row.update({f"{prefix}_ttft_ms": side.get("ttft_ms"), f"{prefix}_tpot_p50_ms": tpot.get("p50"),
                    f"{prefix}_tpot_p99_ms": tpot.get("p99"), f"{prefix}_tokens_per_s": side.get("tokens_per_s")})
        for rate in ("pp", "tg"):
            figure = side.get(f"{rate}_tokens_per_s") or {}
            row.update({f"{prefix}_{rate}_tokens_per_s_mean": figure.get("mean"),
                        f"{prefix}_{rate}_tokens_per_s_sd": figure.get("sd")})
    own = decode.get("own_timings") or {}  # the runtime's own counters (llama.cpp)
    row.update({"decode_own_pp_tokens_per_s": own.get("pp_tokens_per_s"),
                "decode_own_tg_tokens_per_s": own.get("tg_tokens_per_s")})
    accuracy = decode.get("accuracy_vs_fp32") or {}
    row.update({"decode_top1_agreement_vs_fp32": accuracy.get("top1_agreement"),
                "decode_mean_kl_vs_fp32": accuracy.get("mean_kl"),
                "decode_eager_top1_agreement_vs_fp32": (decode.get("eager_accuracy_vs_fp32") or {}).get("top1_agreement")})
    for rate in ("pp", "tg"):
        speedup = decode.get(f"{rate}_speedup") or {}
        ci = speedup.get("ci") or [None, None]
        row.update({f"decode_{rate}_speedup": speedup.get("value"), f"decode_{rate}_speedup_lo": ci[0],
                    f"decode_{rate}_speedup_hi": ci[1]})
    return row


def cells_frame(results: RunResults):
    """One row per cell, as a pandas DataFrame."""
    import pandas as pd

    return pd.DataFrame([cell_row(c) for c in results.cells])


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """An older results.json in today's terms, one version step at a time."""
    version = data.get("schema_version")
    if version == 1:
        data = _migrate_v1(data)
    if data.get("schema_version") == 2:
        data = _migrate_v2(data)
    if data.get("schema_version") == 3:
        data = _migrate_v3(data)
    if data.get("schema_version") == 4:
        data = _migrate_v4(data)
    if data.get("schema_version") == 5:
        data = _migrate_v5(data)
    if data.get("schema_version") == 6:
        # v6 -> v7 adds int8's fields (fp32_eager_latency, accuracy, speedup_vs_fp32...), all
        # empty in a file that had no int8 cells: nothing to change but the version
        data = dict(data, schema_version=7, migrated_from=data.get("migrated_from", 6))
    if data.get("schema_version") == 7:
        # v7 -> v8 adds each cell's role; a cell without one gets it on load from its backend
        # (the reference then was always eager: Cell.__post_init__)
        data = dict(data, schema_version=8, migrated_from=data.get("migrated_from", 7))
    return data


def _drop_intervals(data: dict[str, Any], version: int) -> dict[str, Any]:
    """The cells without their speedup intervals, which readers recompute on load from the
    same samples, at ``version``."""
    cells = []
    for cell in data.get("cells", []):
        cell = dict(cell)
        for key in ("speedup_ci", "break_even_ci", "interval"):
            cell.pop(key, None)
        cells.append(cell)
    return dict(data, cells=cells, schema_version=version, migrated_from=data.get("migrated_from", version - 1))


def _migrate_v5(data: dict[str, Any]) -> dict[str, Any]:
    """v5 -> v6: the interval is a plain percentile of the hierarchical bootstrap, where v5
    expanded it for the number of processes (to the 0.5th-99.5th percentiles for 3)."""
    return _drop_intervals(data, 6)


def _migrate_v4(data: dict[str, Any]) -> dict[str, Any]:
    """v4 -> v5: the speedup interval resamples processes, then blocks of rounds within
    each (``interval`` says how), where v4 resampled pairs within each process."""
    return _drop_intervals(data, 5)


def _migrate_v1(data: dict[str, Any]) -> dict[str, Any]:
    """v1 -> v2: the speedup interval is recomputed with the paired bootstrap (the derived
    figures are refilled on load by every reader that reports); the memory figure was the
    worker's own peak above a baseline taken before compiling (now ``compile_peak_mb``,
    which also counts child processes; its baseline and its ratio to eager's are gone); a
    compile phase called ``import`` was a model importer's step (now ``frontend``:
    ``import`` is every backend's import of its modules, outside compile_s), whichever
    backend wrote it."""
    cells = []
    for cell in data.get("cells", []):
        cell = dict(cell)
        cell.pop("speedup_ci", None)  # v1 bootstrapped unpaired; recomputed paired on load
        for gone in ("rss_baseline_mb", "peak_rss_ratio_vs_eager"):
            cell.pop(gone, None)
        if "peak_rss_delta_mb" in cell:
            cell.setdefault("compile_peak_mb", cell.pop("peak_rss_delta_mb"))
        phases = cell.get("compile_phases")
        if isinstance(phases, dict) and "import" in phases:
            cell["compile_phases"] = {("frontend" if k == "import" else k): v for k, v in phases.items()}
        cells.append(cell)
    return dict(data, cells=cells, schema_version=2, migrated_from=1)


def _migrate_v2(data: dict[str, Any]) -> dict[str, Any]:
    """v2 -> v3: non-finite floats were the strings "nan", "inf" and "-inf" (now null and
    +-1e999, plain JSON numbers); whether a rerun may change a cell was read from its status
    and error text (now the ``transient`` field)."""
    data = _decode_nonfinite(data)
    cells = []
    for cell in data.get("cells", []):
        cell = dict(cell)
        cell.setdefault("transient", cell.get("status") in TRANSIENT_STATUSES or (
            cell.get("status") == "failed" and str(cell.get("error") or "").startswith("worker killed by")))
        cells.append(cell)
    return dict(data, cells=cells, schema_version=3, migrated_from=data.get("migrated_from", 2))


def _decode_nonfinite(value: Any) -> Any:
    if value in ("nan", "inf", "-inf") and isinstance(value, str):
        return None if value == "nan" else float(value)
    if isinstance(value, dict):
        return {k: _decode_nonfinite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode_nonfinite(v) for v in value]
    return value


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity: NaN becomes null (not a number, as no number is), and
    infinity a marker that ``dumps`` writes as 1e999, a JSON number that every parser
    reads back as infinity."""
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return _INF if value > 0 else "-" + _INF
        return value
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def dumps(data: Any) -> str:
    """Strict JSON text of ``data`` (see ``_clean``)."""
    text = json.dumps(_clean(data), indent=2, allow_nan=False)
    return text.replace(f'"-{_INF}"', "-1e999").replace(f'"{_INF}"', "1e999") + "\n"


def atomic_write_json(path: str | Path, data: Any) -> None:
    atomic_write_text(path, dumps(data))



def _migrate_v3(data: dict[str, Any]) -> dict[str, Any]:
    """v3 -> v4: one name and one type per concept. The backend's statistics were
    ``latency_ms`` beside a float ``eager_latency_ms`` (eager's median); now ``latency`` and
    ``eager_latency`` are both statistics, and the medians are properties. Files that kept
    only eager's median get it as a one-sample statistic (n=1), which is all they know."""
    cells = []
    for cell in data.get("cells", []):
        cell = dict(cell)
        if "latency_ms" in cell:
            cell.setdefault("latency", cell.pop("latency_ms"))
        eager_ms = cell.pop("eager_latency_ms", None)
        if cell.get("eager_latency") is None and isinstance(eager_ms, (int, float)):
            cell["eager_latency"] = dataclasses.asdict(LatencyStats.from_ms([eager_ms], number=1))
        cells.append(cell)
    return dict(data, cells=cells, schema_version=4, migrated_from=data.get("migrated_from", 3))
