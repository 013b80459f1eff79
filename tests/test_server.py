"""--scenario server: MLPerf LoadGen's Server scenario, the QPS search, its summary parsed,
and an unavailable cell (never a crash) where LoadGen is not installed."""
import importlib.util
import sys

import pytest

import adapters
from adapters import BackendUnavailable
from adapters.base import Backend, CompileResult
from compare.measure import loadgen
from compare.measure.loadgen import QpsSearch, ServerConfig, p99_bound, parse_summary
from compare.results.protocol import CellMeasurement, CellSpec
from compare.worker import steps as worker
from conftest import FIXTURES, load_results, run_cli, tiny_spec

HAS_LOADGEN = importlib.util.find_spec("mlperf_loadgen") is not None
needs_loadgen = pytest.mark.skipif(not HAS_LOADGEN, reason="mlcommons-loadgen is not installed (dlcompare[loadgen])")
# A real mlperf_log_summary.txt, kept from a LoadGen 6.0.17 run of this driver (ORT, mlp, --size small).
SUMMARY = FIXTURES / "loadgen" / "mlperf_log_summary.txt"
# Runs short enough for a test: 0.2 s each, two per side, and a bound any run on this machine meets.
TINY_SERVER = {"p99_ms": 1000.0, "run_ms": 200, "runs": 2, "min_queries": 100}


@pytest.mark.unit
def test_a_real_loadgen_summary_is_parsed():
    summary = parse_summary(SUMMARY.read_text())
    assert summary["scenario"] == "Server" and summary["mode"] == "PerformanceOnly"
    assert summary["result"] in ("VALID", "INVALID")
    assert {"perf_constraints", "min_duration", "min_queries", "early_stopping"} <= set(summary)
    assert summary["scheduled_qps"] > 0 and summary["completed_qps"] > 0 and summary["target_qps"] > 0
    assert 0 < summary["min_ms"] <= summary["p50_ms"] <= summary["p90_ms"] <= summary["p99_ms"] <= summary["max_ms"]
    assert summary["p99.9_ms"] >= summary["p99_ms"] and summary["target_latency_ms"] > 0


@pytest.mark.unit
def test_a_summary_line_is_read_to_the_nanosecond():
    text = ("Scenario : Server\nResult is : INVALID\n  Performance constraints satisfied : NO\n"
            "Scheduled samples per second : 99.87\n99.00 percentile latency (ns)   : 2500000\n"
            "target_latency (ns): 1000000\n")
    summary = parse_summary(text)
    assert summary == {"scenario": "Server", "result": "INVALID", "perf_constraints": False, "scheduled_qps": 99.87,
                       "p99_ms": 2.5, "target_latency_ms": 1.0}


@pytest.mark.unit
def test_a_summary_without_a_result_is_refused():
    with pytest.raises(ValueError, match="Result is"):
        parse_summary(SUMMARY.read_text().split("Result is")[0])


@pytest.mark.unit
def test_the_search_bisects_towards_the_highest_qps_within_the_bound():
    search = QpsSearch(capacity_qps=1000.0)
    tried = []
    for _ in range(6):
        qps = search.next_qps()
        tried.append(qps)
        search.record({"target_qps": qps, "met": qps <= 610.0, "p99_ms": qps / 100, "own_p99_ms": qps / 90})
    # half the capacity first, then halfway each time; a miss is repeated before it caps the search
    assert tried == [500.0, 750.0, 750.0, 625.0, 625.0, 562.5]
    result = search.result()
    assert 610.0 - 1000.0 / 16 <= result["max_qps"] <= 610.0
    assert result["p99_at_max_ms"] == result["max_qps"] / 100 and len(result["loadgen_runs"]) == 6


@pytest.mark.unit
def test_a_search_whose_every_run_misses_has_no_max():
    search = QpsSearch(capacity_qps=100.0)
    for _ in range(3):
        search.record({"target_qps": search.next_qps(), "met": False})
    assert search.next_qps() == 100.0 / 4 and search.result()["max_qps"] is None  # 25 QPS awaits its repeat


@pytest.mark.unit
def test_one_noisy_miss_does_not_cap_the_search():
    search = QpsSearch(capacity_qps=100.0)
    noisy = iter([False, True, True, True])  # the first run at 50 QPS misses once, by noise
    for _ in range(4):
        search.record({"target_qps": search.next_qps(), "met": next(noisy)})
    assert [r["target_qps"] for r in search.runs] == [50.0, 50.0, 75.0, 87.5]
    assert search.result()["max_qps"] == 87.5 and search.runs[0]["verdict"] == "missed (to be confirmed)"


@pytest.mark.unit
def test_the_bound_is_eagers_median_times_ten_floored_or_the_one_given():
    bound, rule = p99_bound(ServerConfig(), 0.5)
    assert bound == 5.0 and rule.startswith("10x eager's back-to-back median")
    assert p99_bound(ServerConfig(), 0.01)[0] == loadgen.MIN_BOUND_MS
    assert p99_bound(ServerConfig(p99_ms=3.0), 0.5) == (3.0, "--server-p99-ms")


@pytest.mark.unit
def test_server_flags_need_the_server_scenario(tmp_path):
    from compare import cli
    from compare.config import UsageError

    config = cli.make_config(cli.parse(["--scenario", "server", "--server-runs", "3", "--output-dir", str(tmp_path)]))
    assert config.scenario_options == {"p99_ms": None, "run_ms": ServerConfig.run_ms, "runs": 3,
                                       "min_queries": ServerConfig.min_queries}
    assert cli.make_config(cli.parse(["--output-dir", str(tmp_path)])).scenario_options == {}
    with pytest.raises(UsageError, match="--server-p99-ms applies to --scenario server only"):
        cli.make_config(cli.parse(["--server-p99-ms", "5", "--output-dir", str(tmp_path)]))


@pytest.mark.unit
def test_the_server_parameters_travel_from_the_command_line_to_every_cell_spec(tmp_path):
    from compare import cli
    from compare.harness.cells import CellSpecs
    from compare.harness.pooling import ProcessPlan
    from workloads import resolve_workloads

    config = cli.make_config(cli.parse(["--scenario", "server", "--server-runs", "3", "--output-dir", str(tmp_path)]))
    (mlp,) = resolve_workloads(["mlp"], [], "all")
    spec = CellSpecs(config).spec(mlp, "ort")
    again = CellSpec.from_json(spec.to_json())
    assert ServerConfig(**again.scenario_options) == ServerConfig(runs=3)
    plan = ProcessPlan(2)  # every process has them; only the first searches (serve_under_loadgen)
    assert plan.spec(spec, 0).scenario_options == plan.spec(spec, 1).scenario_options == spec.scenario_options


@pytest.mark.unit
def test_without_loadgen_a_server_cell_is_unavailable_with_the_install_hint(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "mlperf_loadgen", None)  # import mlperf_loadgen now raises ImportError
    with pytest.raises(BackendUnavailable, match=r"needs MLPerf LoadGen.*pip install -e '\.\[loadgen\]'"):
        worker.measure_cell(tiny_spec("eager", tmp_path, threads=1, scenario="server", scenario_options=TINY_SERVER))


def test_without_loadgen_a_server_run_reports_unavailable_cells(tmp_path):
    """LoadGen hidden from the workers by a module on their path that fails to import."""
    proc = run_cli("--scenario", "server", "--backends", "ort", "--workloads", "mlp", "--size", "small",
                   "--reference-processes", "1", "--output-dir", tmp_path, env={"PYTHONPATH": str(FIXTURES / "no_loadgen")})
    assert proc.returncode == 0, proc.stdout + proc.stderr  # unavailable is reported, not a failure
    cells = load_results(tmp_path)["cells"]
    assert {c["backend"] for c in cells} == {"eager", "ort"}
    for cell in cells:
        assert cell["status"] == "unavailable" and "pip install -e '.[loadgen]'" in cell["error"]
        assert cell["server"] is None


class PlainBackend(Backend):
    """Eager's module as the 'compiled' call, so the search runs without a compiler."""

    name = "plain"

    def compile(self, module, example_inputs, ctx):
        from adapters.eager import TorchCompiled

        with ctx.phase("wrap"):
            compiled = TorchCompiled(module, ctx.device)
        return CompileResult(compiled)


@needs_loadgen
def test_the_worker_searches_the_backend_and_eager_alternately(monkeypatch, tmp_path):
    monkeypatch.setattr(adapters, "get_backend", lambda name: PlainBackend())
    spec = tiny_spec("plain", tmp_path, threads=1, scenario="server", scenario_options=TINY_SERVER)
    cell = CellMeasurement.from_json(worker.measure_cell(spec).to_json())
    server = cell.server
    assert server is not None and server["loadgen_version"] and server["p99_bound_ms"] == 1000.0
    for side in (server, server["eager"]):
        runs = side["loadgen_runs"]
        assert len(runs) == 2 and runs[0]["target_qps"] == pytest.approx(side["capacity_qps"] / 2, rel=1e-4)
        for run in runs:
            assert run["scenario"] == "Server" and run["result"] in ("VALID", "INVALID")
            assert run["met"] == (run["p99_ms"] <= 1000.0) and run["completed"] >= 100
            assert run["own_p99_ms"] is not None and run["scheduled_qps"] > 0
        assert side["max_qps"] == max(r["target_qps"] for r in runs if r["met"])
    assert server["qps_ratio_vs_eager"] == pytest.approx(server["max_qps"] / server["eager"]["max_qps"])
    assert (tmp_path / "loadgen" / "backend-0" / "mlperf_log_summary.txt").exists()


@needs_loadgen
def test_server_run_through_ort_reports_loadgens_summary_beside_its_own(tmp_path):
    proc = run_cli("--scenario", "server", "--backends", "ort", "--workloads", "mlp", "--size", "small",
                   "--server-run-ms", "200", "--server-runs", "2", "--server-p99-ms", "1000",
                   "--time-budget", "0.3", "--min-samples", "3", "--reference-processes", "1", "--threads", "1",
                   "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = load_results(tmp_path)
    assert data["config"]["scenario"] == "server" and data["config"]["scenario_options"]["runs"] == 2
    cells = {c["backend"]: c for c in data["cells"]}
    assert cells["ort"]["status"] == "ok" and cells["eager"]["status"] == "ok"
    ort, eager_cell = cells["ort"]["server"], cells["eager"]["server"]
    assert ort["max_qps"] and ort["eager"]["max_qps"] and ort["qps_ratio_vs_eager"] > 0
    assert "eager" not in eager_cell and len(eager_cell["loadgen_runs"]) == 2
    assert len(ort["loadgen_runs"]) == 2 and all(r["p99_ms"] > 0 for r in ort["loadgen_runs"])
    summary = (tmp_path / "summary.md").read_text()
    assert "scenario server (MLPerf LoadGen Server: p99 within 1000 ms" in summary
    assert "## Server (LoadGen)" in summary
    header = (tmp_path / "results.csv").read_text().splitlines()[0]
    assert "server_max_qps" in header and "server_qps_ratio_vs_eager" in header
    assert "server (LoadGen)" in proc.stdout


def _server_results():
    from compare.measure.latency import LatencyStats
    from compare.results.schema import Cell, RunResults

    run = {"target_qps": 500.0, "met": True, "result": "INVALID", "p99_ms": 2.0, "own_p99_ms": 1.9}
    server = {"loadgen_version": "6.0.17", "p99_bound_ms": 5.0, "max_qps": 500.0, "p99_at_max_ms": 2.0,
              "own_p99_at_max_ms": 1.9, "loadgen_runs": [run, {**run, "result": "VALID"}],
              "eager": {"max_qps": 250.0, "p99_at_max_ms": 4.0, "loadgen_runs": [run]}, "qps_ratio_vs_eager": 2.0}
    stats = LatencyStats.from_ms([1.0, 1.0, 1.0], 1)
    cells = [Cell.from_flat("mlp", "ort", "ok", latency=stats, eager_latency=stats, server=server),
             Cell.from_flat("mlp", "openvino", "unavailable", error="no LoadGen")]
    config = {"scenario": "server", "scenario_options": {"p99_ms": None, "run_ms": 2500, "runs": 6, "min_queries": 100}}
    return RunResults(environment={"threads": 2, "cores": 2}, config=config, cells=cells)


@pytest.mark.unit
def test_the_server_table_csv_and_header_read_the_record():
    from compare.report.text import summary_markdown
    from compare.results.schema import cell_row
    from compare.scenarios.server import server_conditions, server_rows

    results = _server_results()
    (row,) = server_rows(results)  # the unavailable cell has no record: it says why in the main table
    assert row["max QPS"] == "500.0" and row["eager max QPS"] == "250.0" and row["QPS vs eager"] == "2.00x"
    assert row["VALID runs"] == "1/3"
    assert "## Server (LoadGen)" in summary_markdown(results) and "LoadGen 6.0.17." in summary_markdown(results)
    columns = cell_row(results.cells[0])
    assert columns["server_max_qps"] == 500.0 and columns["server_eager_max_qps"] == 250.0
    assert columns["server_loadgen_runs"] == 3 and "server_max_qps" not in cell_row(results.cells[1])
    assert server_conditions(results.config) == (" (MLPerf LoadGen Server: p99 within 10x eager's median (at least "
                                                 "1 ms); up to 6 runs per side of at least 2.5 s and 100 queries, "
                                                 "at most 10 s)")
    assert server_conditions({"scenario": "single-stream"}) == ""
