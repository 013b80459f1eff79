"""The typed contract between the parent and a worker: a spec and a measurement that go
through JSON and back unchanged, and refuse a field too many or too few by name; cells
built from a measurement, and results files that refuse fields they do not know."""
import dataclasses
import json

import pytest

from compare.measure.latency import LatencyStats, RecordError
from compare.results.protocol import (
    PROCESS_ONLY,
    BisectSpec,
    CellMeasurement,
    CellSpec,
    DynamicSpec,
    ended,
)
from compare.results.schema import Cell, ResultsError, RunResults
from compare.results.sections import SECTION_OF
from conftest import tiny_spec

pytestmark = pytest.mark.unit

IDENTITY = dict(workload="mlp", backend="ort", role="candidate", size="small", device="cpu", threads=2, batch=None, dtype="fp32")


def _measurement(**fields):
    stats = LatencyStats.from_ms([1.0, 1.1, 0.9], 1)
    return CellMeasurement(status="ok", latency=stats, eager_latency=stats, compile_s=0.5, numerics_ok=True,
                           compile_phases={"build": 0.5}, info={"note": 1}, round_s=0.02, **fields)


def test_a_spec_goes_through_json_and_back(tmp_path):
    spec = tiny_spec("eager", tmp_path, affinity=[0], explain=True)
    back = CellSpec.from_json(spec.to_json())
    assert back == spec and isinstance(back.timing, type(spec.timing)) and back.affinity == (0,)
    dynamic = dataclasses.replace(spec, dynamic=DynamicSpec("symbolic", {"dim": "batch", "values": [2, 3]}, 5))
    assert CellSpec.from_json(dynamic.to_json()) == dynamic
    bisect = BisectSpec(cell=spec, label="mlp", out_dir=str(tmp_path), factor=10.0)
    assert BisectSpec.from_json(bisect.to_json()) == bisect


def test_the_harness_and_the_spec_share_their_defaults(tmp_path):
    spec = tiny_spec("eager", tmp_path, timing={})
    # the run's config holds the seed and the timing defaults; the spec repeats none of them
    assert spec.seed == 0 and spec.timing.max_samples == 300 and spec.count_work and not spec.interleave


@pytest.mark.parametrize("part", ["", "timing", "dynamic"])
def test_an_unknown_spec_field_is_named(tmp_path, part):
    data = json.loads(dataclasses.replace(
        tiny_spec("eager", tmp_path), dynamic=DynamicSpec("specialize", {}, 5)).to_json())
    (data[part] if part else data)["seeed"] = 1
    with pytest.raises(RecordError, match="unknown field.*seeed"):
        CellSpec.from_dict(data)


def test_a_missing_spec_field_is_named(tmp_path):
    data = json.loads(tiny_spec("eager", tmp_path).to_json())
    del data["numerics_draws"]
    with pytest.raises(RecordError, match="missing field.*numerics_draws"):
        CellSpec.from_dict(data)


def test_a_measurement_goes_through_json_and_back():
    measurement = _measurement(crosscheck={"tool": "t", "median_ms": 1.0, "ratio": 1.0})
    back = CellMeasurement.from_json(measurement.to_json())
    assert back == measurement and isinstance(back.latency, LatencyStats)
    assert CellMeasurement.from_json(ended("timeout", "slow").to_json()) == ended("timeout", "slow")
    assert ended("timeout", "slow").transient and not ended("failed", "x").transient


def test_an_unknown_or_missing_measurement_field_is_named():
    data = _measurement().to_dict()
    data["latncy"] = None
    with pytest.raises(RecordError, match="unknown field.*latncy"):
        CellMeasurement.from_dict(data)
    del data["latncy"], data["compile_s"]
    with pytest.raises(RecordError, match="missing field.*compile_s"):
        CellMeasurement.from_dict(data)
    data = _measurement().to_dict()
    data["latency"]["p50"] = 1.0
    with pytest.raises(RecordError, match="unknown field.*p50"):
        CellMeasurement.from_dict(data)
    with pytest.raises(RecordError, match="unknown status"):
        CellMeasurement(status="great")


def test_a_cell_is_built_from_a_measurement():
    cell = Cell.from_measurement(_measurement(wall_s=3.0), **IDENTITY, log="logs/mlp.ort.log")
    assert cell.key == ("mlp", "ort", "small", "cpu", None, "fp32") and cell.threads == 2
    assert cell.latency_median_ms == 1.0 and cell.costs.compile_phases == {"build": 0.5} and cell.conditions.wall_s == 3.0
    assert cell.conditions.log == "logs/mlp.ort.log" and cell.status == "ok"
    # every field the worker and the parent fill is a cell's, or said to be the process's alone
    cell_fields = {f.name for f in dataclasses.fields(Cell)} | set(SECTION_OF)
    for f in dataclasses.fields(CellMeasurement):
        assert (f.name in cell_fields) != (f.name in PROCESS_ONLY), f.name


def test_a_cell_with_an_unknown_field_is_refused_by_name(tmp_path):
    data = Cell.from_measurement(_measurement(), **IDENTITY).to_dict()
    assert Cell.from_dict(data).latency.n == 3
    data["numerics_okk"] = True
    with pytest.raises(ResultsError, match="unknown field.*numerics_okk"):
        Cell.from_dict(data)
    results = RunResults(environment={}, config={}, cells=[], run_id="r").to_dict()
    results["cells"] = [data]
    (tmp_path / "results.json").write_text(json.dumps(results))
    with pytest.raises(ResultsError, match="numerics_okk"):
        RunResults.load(tmp_path)


def test_a_version_1_file_loads_with_its_fields_of_then(tmp_path):
    """v1 kept a memory baseline and its ratio to eager's, and called a model importer's
    compile phase ``import`` (whichever backend had one)."""
    stats = LatencyStats.from_ms([1.0, 1.2], 1).to_dict()
    cell = dict(workload="mlp", backend="mybackend", status="ok", latency_ms=stats, eager_latency_ms=2.0,
                peak_rss_delta_mb=50.0, rss_baseline_mb=300.0, peak_rss_ratio_vs_eager=1.5, speedup_ci=[1, 2],
                compile_phases={"export": 0.1, "import": 0.2, "build": 1.0})
    (tmp_path / "results.json").write_text(json.dumps({"schema_version": 1, "environment": {}, "cells": [cell]}))
    (back,) = RunResults.load(tmp_path).cells
    assert back.memory.compile_peak_mb == 50.0 and back.costs.compile_phases == {"export": 0.1, "frontend": 0.2, "build": 1.0}
    assert back.eager_median_ms == 2.0 and back.latency.n == 2


def test_an_experiment_record_keeps_its_fields_and_the_process_figures():
    identity = {"workload": "mlp", "backend": "ort"}
    record = {"workload": "mlp", "backend": "ort", "strategy": "symbolic", "status": "ok", "compiles": 1}
    done = CellMeasurement(status="ok", experiment=record, wall_s=2.0, workload_key="k", started_at=1.0)
    assert done.experiment_record(identity, "logs/x.log") == {**record, "wall_s": 2.0, "workload_key": "k",
                                                               "started_at": 1.0, "log": "logs/x.log"}
    lost = ended("timeout", "no result within 5 s").experiment_record(identity, None)
    assert lost["status"] == "timeout" and lost["transient"] is True and lost["error"] == "no result within 5 s"
