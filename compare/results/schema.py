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
from compare.results.roles import REFERENCE, ROLES, role_of
from compare.results.sections import (
    SECTIONS,
    Conditions,
    Costs,
    Instruments,
    Int8,
    Memory,
    Numerics,
    ScenarioFigures,
    Spread,
    flatten,
    route_flat,
)

SCHEMA_VERSION = 10
# Versions this dlcompare reads; older ones are migrated on load (see ``migrate``).
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
_INF = "__dlcompare_inf__"  # stands in for infinity until the text is written (see dumps)


class ResultsError(ValueError):
    """A results file cannot be read; the message says which and why in one line."""


def variant_label(workload: str, batch: int | None, dtype: str = "fp32") -> str:
    parts = ([f"b{batch}"] if batch is not None else []) + ([dtype] if dtype != "fp32" else [])
    return f"{workload}[{','.join(parts)}]" if parts else workload


@dataclass
class Cell:
    """One (workload, backend) measurement: identity, status, compile, latency, speedup and
    error; every other figure is in a section owned by what produces it (results.sections)."""

    workload: str
    backend: str
    status: str  # protocol.STATUSES
    transient: bool = False  # a rerun may end it otherwise (timeout, OOM, killed): --resume reruns it
    role: str | None = None  # roles.REFERENCE or roles.CANDIDATE; None: from the backend (the default reference)
    size: str = "default"
    device: str = "cpu"
    batch: int | None = None  # --batch value; None: the workload's own batch at this size
    dtype: str = "fp32"  # precision of weights and inputs (--dtype)
    threads: int | None = None
    error: str | None = None
    compile_s: float | None = None
    latency: LatencyStats | None = None  # the backend's per-call latency (ms)
    eager_latency: LatencyStats | None = None  # the reference, timed alternately in the same worker(s)
    speedup: float | None = None  # the reference's median / this median (derived)
    speedup_ci: list[float] | None = None  # paired-bootstrap 95% interval of the speedup (derived)
    noisy: bool | None = None
    numerics: Numerics = field(default_factory=Numerics)
    costs: Costs = field(default_factory=Costs)
    memory: Memory = field(default_factory=Memory)
    spread: Spread = field(default_factory=Spread)
    int8: Int8 = field(default_factory=Int8)
    scenario: ScenarioFigures = field(default_factory=ScenarioFigures)
    instruments: Instruments = field(default_factory=Instruments)
    conditions: Conditions = field(default_factory=Conditions)

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
    def from_flat(cls, workload: str, backend: str, status: str, **fields: Any) -> "Cell":
        """A cell from flat fields, each section's routed to it by name (``SECTION_OF``)."""
        kwargs = route_flat(dict(fields, workload=workload, backend=backend, status=status))
        return cls(**{k: (SECTIONS[k](**v) if k in SECTIONS else v) for k, v in kwargs.items()})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Cell":
        """A cell from results.json: sections nested (schema 9) or flat (up to 8)."""
        missing = {"workload", "backend", "status"} - set(data)
        if missing:
            raise ResultsError(f"cell is missing field(s) {', '.join(sorted(missing))}")
        where = f"cell {data['workload']}/{data['backend']}"
        if any(not isinstance(data.get(name) or {}, dict) for name in SECTIONS):
            raise ResultsError(f"{where}: a section is not an object")
        flat = flatten(data)
        unknown = sorted(set(route_flat(flat)) - {f.name for f in dataclasses.fields(cls)})
        if unknown:  # a misspelt field must not quietly become None
            raise ResultsError(f"{where} has unknown field(s) {', '.join(unknown)}")
        try:
            flat.update({name: LatencyStats.from_json(flat.get(name), name) for name in STATS_FIELDS})
        except RecordError as exc:
            raise ResultsError(f"{where}: {exc}") from None
        if flat["status"] not in STATUSES:
            raise ResultsError(f"{where} has unknown status {flat['status']!r}")
        if flat.get("role") not in (None, *ROLES):
            raise ResultsError(f"{where} has unknown role {flat['role']!r}")
        return cls.from_flat(**flat)

    @classmethod
    def from_measurement(cls, measurement: CellMeasurement, *, workload: str, backend: str, role: str, size: str,
                         device: str, threads: int | None, batch: int | None, dtype: str,
                         log: str | None = None) -> "Cell":
        """The cell of what its worker(s) measured, with its identity and role (the spec's)."""
        figures = {k: v for k, v in vars(measurement).items() if k not in PROCESS_ONLY}
        return cls.from_flat(workload=workload, backend=backend, role=role, size=size, device=device, threads=threads,
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
        "import_s": cell.costs.import_s,
        "compile_s": cell.compile_s,
        "time_to_first_result_s": cell.costs.time_to_first_result_s,
        "tuning_s": cell.costs.tuning_s,
        "latency_ms": lat.median if lat else None,
        "latency_p10_ms": lat.p10 if lat else None,
        "latency_p90_ms": lat.p90 if lat else None,
        "latency_iqr_ms": lat.iqr if lat else None,
        "latency_samples": lat.n if lat else None,
        "calls_per_sample": lat.number if lat else None,
        "processes": len(cell.spread.process_samples or []) or None,
        "eager_latency_ms": cell.eager_median_ms,
        "eager_only_ms": cell.spread.eager_only_ms,
        "reference_deviation": cell.spread.reference_deviation,
        "speedup": cell.speedup,
        "speedup_vs_fp32": cell.int8.speedup_vs_fp32,
        "fp32_eager_latency_ms": cell.int8.fp32_eager_latency.median if cell.int8.fp32_eager_latency else None,
        "int8_cosine_min": (cell.int8.accuracy or {}).get("cosine_min"),
        "int8_rel_err": (cell.int8.accuracy or {}).get("rel_err"),
        "int8_top1_agreement": (cell.int8.accuracy or {}).get("top1_agreement"),
        "speedup_ci_low": cell.speedup_ci[0] if cell.speedup_ci else None,
        "speedup_ci_high": cell.speedup_ci[1] if cell.speedup_ci else None,
        "noisy": cell.noisy,
        "max_abs_err": cell.numerics.max_abs_err,
        "max_rel_err": cell.numerics.max_rel_err,
        "max_abs_err_fp64": cell.numerics.max_abs_err_fp64,
        "eager_max_abs_err_fp64": cell.numerics.eager_max_abs_err_fp64,
        "numerics_ok": cell.numerics.numerics_ok,
        "break_even_calls": cell.costs.break_even_calls,
        "break_even_calls_excl_tuning": cell.costs.break_even_calls_excl_tuning,
        "break_even_ci_low": cell.costs.break_even_ci[0] if cell.costs.break_even_ci else None,
        "break_even_ci_high": cell.costs.break_even_ci[1] if cell.costs.break_even_ci else None,
        "peak_rss_mb": cell.memory.peak_rss_mb,
        "load_mb": cell.memory.load_mb,
        "compile_peak_mb": cell.memory.compile_peak_mb,
        "steady_state_mb": cell.memory.steady_state_mb,
        "threads": cell.threads,
        "allocator": cell.conditions.allocator,
        "cache": cell.costs.cache,
    }
    for scenario_columns in extensions.cell_columns():
        row.update(scenario_columns(cell))
    for phase, seconds in cell.costs.compile_phases.items():
        row[f"phase_{phase}_s"] = seconds
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
    if data.get("schema_version") == 8:
        # v8 -> v9 nests the figures beyond the core in sections under the same names; a flat
        # cell is routed into them on load (Cell.from_dict), so only the version moves
        data = dict(data, schema_version=9, migrated_from=data.get("migrated_from", 8))
    if data.get("schema_version") == 9:
        data = _migrate_v9(data)
    return data


def _migrate_v9(data: dict[str, Any]) -> dict[str, Any]:
    """v9 -> v10: a scenario's options are the config's ``scenario_options`` (a scenario's own,
    whichever it is), where v9 had LoadGen's as ``server`` (None in any other scenario)."""
    config = dict(data.get("config") or {})
    if "server" in config:
        config["scenario_options"] = config.pop("server") or {}
    return dict(data, config=config, schema_version=10, migrated_from=data.get("migrated_from", 9))


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
