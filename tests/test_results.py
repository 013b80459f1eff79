import json
import math
from pathlib import Path

import pytest

from compare.results.schema import SCHEMA_VERSION, Cell, LatencyStats, ResultsError, RunResults, atomic_write_json, dumps

pytestmark = pytest.mark.unit


def _results():
    stats = LatencyStats(median=1.0, p10=0.9, p90=1.2, q1=0.95, q3=1.05, mean=1.0, min=0.9, n=3, number=1,
                         samples=[0.9, 1.0, 1.1])
    cell = Cell.from_flat(workload="mlp", backend="inductor", status="ok", latency=stats, speedup=1.5,
                max_abs_err=float("nan"), max_rel_err=float("inf"), compile_phases={"trace": 1.0})
    return RunResults(environment={"threads": 2}, config={}, cells=[cell], run_id="r1")


def test_round_trip(tmp_path):
    res = _results()
    atomic_write_json(tmp_path / "results.json", res.to_dict())
    back = RunResults.load(tmp_path)
    assert back.schema_version == SCHEMA_VERSION
    cell = back.cells[0]
    assert cell.latency.median == 1.0 and cell.latency.samples == [0.9, 1.0, 1.1]
    # strict JSON (no NaN, no Infinity tokens); infinity comes back as a float, NaN as null
    text = (tmp_path / "results.json").read_text()
    json.loads(text, parse_constant=lambda name: pytest.fail(f"non-JSON constant {name}"))
    assert cell.numerics.max_rel_err == math.inf and cell.numerics.max_abs_err is None
    assert '"max_rel_err": 1e999' in text


def test_a_version_2_file_is_migrated_on_load(tmp_path):
    data = _results().to_dict()
    data["schema_version"] = 2
    data["cells"][0].update(max_abs_err="nan", max_rel_err="inf")
    data["cells"].append(dict(workload="conv", backend="ort", status="failed", error="worker killed by node loss: x"))
    data["cells"].append(dict(workload="conv", backend="tvm", status="timeout", error="no result within 5 s"))
    data["cells"].append(dict(workload="conv", backend="iree", status="failed", error="compiler crashed"))
    (tmp_path / "results.json").write_text(json.dumps(data))
    back = RunResults.load(tmp_path)
    first, lost, slow, broken = back.cells
    assert first.numerics.max_abs_err is None and first.numerics.max_rel_err == math.inf  # no string where a float belongs
    assert (lost.transient, slow.transient, broken.transient, first.transient) == (True, True, False, False)


def test_a_version_3_file_gets_one_name_and_type_per_latency(tmp_path):
    data = _results().to_dict()
    data["schema_version"] = 3
    stats = data["cells"][0].pop("latency")
    data["cells"][0].update(latency_ms=stats, eager_latency=dict(stats, median=1.5), eager_latency_ms=1.5)
    data["cells"].append(dict(workload="conv", backend="ort", status="ok", latency_ms=stats, eager_latency_ms=2.0))
    (tmp_path / "results.json").write_text(json.dumps(data))
    full, median_only = RunResults.load(tmp_path).cells
    assert isinstance(full.latency, LatencyStats) and full.latency.samples == [0.9, 1.0, 1.1]
    assert full.eager_median_ms == 1.5 and full.eager_latency.n == 3
    # a file that kept only eager's median: a one-sample statistic, nothing invented
    assert median_only.eager_median_ms == 2.0 and median_only.eager_latency.n == 1
    assert median_only.latency_median_ms == 1.0


def test_upsert_replaces_same_key():
    res = _results()
    res.upsert(Cell.from_flat(workload="mlp", backend="inductor", status="failed", error="x"))
    assert len(res.cells) == 1 and res.cells[0].status == "failed"
    res.upsert(Cell.from_flat(workload="mlp", backend="ort", status="ok"))
    assert len(res.cells) == 2


def test_unknown_schema_version_is_refused(tmp_path):
    data = _results().to_dict()
    data["schema_version"] = 99
    (tmp_path / "results.json").write_text(json.dumps(data))
    with pytest.raises(ResultsError, match="schema_version 99 is not supported"):
        RunResults.load(tmp_path)


def test_truncated_file_gives_one_line_error(tmp_path):
    text = json.dumps(_results().to_dict())
    (tmp_path / "results.json").write_text(text[: len(text) // 2])
    with pytest.raises(ResultsError, match="not valid JSON") as info:
        RunResults.load(tmp_path)
    assert "\n" not in str(info.value)


def test_bad_cell_fields(tmp_path):
    data = _results().to_dict()
    data["cells"][0]["status"] = "great"
    (tmp_path / "results.json").write_text(json.dumps(data))
    with pytest.raises(ResultsError, match="unknown status"):
        RunResults.load(tmp_path)
    del data["cells"][0]["backend"]
    (tmp_path / "results.json").write_text(json.dumps(data))
    with pytest.raises(ResultsError, match="missing field"):
        RunResults.load(tmp_path)


def test_atomic_write_leaves_no_temp_files(tmp_path):
    atomic_write_json(tmp_path / "a.json", {"x": 1})
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


@pytest.mark.unit
@pytest.mark.parametrize("name", ["v7-bf16", "v8-offline", "v8-first-look", "v9-first-look"])
def test_files_of_the_last_schema_versions_report_the_figures_they_did(name, tmp_path):
    """Real results files of schema 7 and 8 (flat cells) and 9 (sections; v8-first-look as
    schema 9's writer at b9fd857 wrote it) read into today's records give the CSV rows the
    code of their time gave (every column it had), and so does the same run written at
    today's schema and read back."""
    import pandas as pd

    from compare.results.derived import fill_derived
    from compare.results.schema import cells_frame

    folder = Path(__file__).parent / "fixtures" / "results"
    expected = pd.read_csv(folder / f"{name}.expected.csv")
    run = RunResults.load(folder / f"{name}.json")
    (tmp_path / "results.json").write_text(dumps(run.to_dict()))
    again = RunResults.load(tmp_path)
    assert again.schema_version == SCHEMA_VERSION and "numerics" in again.to_dict()["cells"][0]
    for results in (run, again):
        fill_derived(results)
        frame = cells_frame(results)
        frame.to_csv(tmp_path / "now.csv", index=False)
        now = pd.read_csv(tmp_path / "now.csv")[list(expected.columns)]  # through CSV: the same types
        pd.testing.assert_frame_equal(now, expected)


@pytest.mark.unit
def test_the_core_record_stays_narrow():
    """Figures beyond identity, status, compile, latency, speedup and error belong in a section."""
    import dataclasses

    from compare.results.sections import SECTIONS

    core = [f.name for f in dataclasses.fields(Cell) if f.name not in SECTIONS]
    assert len(dataclasses.fields(Cell)) <= 25 and len(core) <= 17, core


@pytest.mark.unit
def test_a_schema_9_server_config_loads_as_the_scenario_options():
    from compare.results.schema import migrate

    options = {"p99_ms": None, "run_ms": 2500, "runs": 6, "min_queries": 100}
    old = {"schema_version": 9, "config": {"scenario": "server", "server": options}, "cells": []}
    assert migrate(old)["config"] == {"scenario": "server", "scenario_options": options}
    plain = {"schema_version": 9, "config": {"scenario": "back-to-back", "server": None}, "cells": []}
    assert migrate(plain)["config"]["scenario_options"] == {} and migrate(plain)["schema_version"] == 10
