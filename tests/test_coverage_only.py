"""--coverage-only (issue 57): each cell lowered, called once and checked, never timed; the
cells keep their status, compile seconds and numerics verdict, and every report renders."""
import csv
import json

import pytest

import adapters
from adapters.base import Backend, CompileResult
from adapters.eager import TorchCompiled
from compare import cli
from compare.config import UsageError, make_config
from compare.results.protocol import CellMeasurement
from compare.worker import steps as worker
from conftest import load_results, run_cli, tiny_spec


def test_a_coverage_only_run_has_every_verdict_no_timing_and_every_report(tmp_path):
    out = tmp_path / "run"
    # ORT, not Inductor: a 3 s export where Inductor compiles for 12 s (the default suite's budget)
    proc = run_cli("--coverage-only", "--backends", "ort", "--workloads", "mlp,attention", "--size", "small",
                   "--output-dir", out, "--no-history", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = load_results(out)
    cfg = results["config"]
    assert cfg["coverage_only"] is True and (cfg["processes"], cfg["interleave"], cfg["noise_probe_s"]) == (1, False, 0)
    assert not results["experiments"].get("noise_probe")  # no probe before or after the cells
    cells = {(c["workload"], c["backend"]): c for c in results["cells"]}
    assert set(cells) == {(w, b) for w in ("mlp", "attention") for b in ("eager", "ort")}
    for cell in cells.values():
        assert cell["status"] == "ok" and cell["numerics_ok"] is True and cell["max_abs_err"] is not None
        assert cell["compile_s"] is not None and cell["time_to_first_result_s"] is not None
        assert cell["latency"] is None and cell["eager_latency"] is None and cell["speedup"] is None
        assert cell["process_samples"] is None and cell["numerics_after_timing"] is None
        assert "thread_pinning" not in cell["info"]  # read while the timed calls run: none ran
        assert cell["steady_state_mb"] is None  # one call: no second one for steady state
    assert cells[("mlp", "ort")]["compile_s"] > 0.1  # ORT exported and built its session

    summary = (out / "summary.md").read_text()
    assert "coverage only: no timing" in summary and "## Coverage: what lowers" in summary
    assert "latency ms (median" not in summary and "break-even calls [" not in summary  # no timing columns
    assert "| mlp | pass | pass |" in summary
    html = (out / "report.html").read_text()
    assert "coverage only: no timing" in html and 'class="cov-pass"' in html
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 and all(r["status"] == "ok" and r["latency_ms"] == "" and r["speedup"] == "" for r in rows)
    assert all(r["numerics_ok"] == "True" for r in rows)
    written = sorted(p.name for p in (out / "coverage").iterdir())
    assert written == ["ort_models_fp32_inference_cpu_accuracy.csv"]  # timed nothing: no performance file
    terminal = " ".join(proc.stdout.split())  # the table's title wraps
    assert "coverage only: no timing" in terminal
    for column in ("latency ms", "speedup vs eager", "geometric-mean"):
        assert column not in terminal


def test_the_options_that_serve_timing_are_set_to_none_or_refused(tmp_path):
    def config(*flags):
        return make_config(cli.parse(["run", "--coverage-only", "--backends", "inductor", "--workloads", "mlp",
                                      "--size", "small", "--output-dir", str(tmp_path), *flags]))

    cfg = config()
    assert (cfg.processes, cfg.reference_processes, cfg.interleave, cfg.noise_probe_s) == (1, 1, False, 0.0)
    assert config("--processes", "1", "--noise-probe", "0", "--interleave", "off").coverage_only
    for flags in (["--processes", "3"], ["--noise-probe", "2"], ["--interleave", "on"], ["--explain"],
                  ["--crosscheck"], ["--roofline"], ["--reference-processes", "4"], ["--scenario", "offline"]):
        with pytest.raises(UsageError, match="--coverage-only"):
            config(*flags)
    with pytest.raises(UsageError):  # the paper command times its figures: it has no such flag
        cli.parse(["paper", "--coverage-only"])


class CountingCompiled(TorchCompiled):
    calls = 0

    def run(self, prepared):
        CountingCompiled.calls += 1
        return super().run(prepared)


class CountingBackend(Backend):
    name = "counting"

    def compile(self, module, example_inputs, ctx):
        with ctx.phase("wrap"):
            compiled = CountingCompiled(module, ctx.device)
        return CompileResult(compiled)


def test_the_worker_calls_the_backend_once_and_never_times(monkeypatch, tmp_path):
    """In the worker's own steps: nothing that times or serves timing runs, and the backend
    is called once (its numerics read the first call's outputs)."""
    monkeypatch.setattr(adapters, "get_backend", lambda name: CountingBackend())

    def never(*args, **kwargs):
        raise AssertionError("a coverage-only cell ran a step that serves timing")

    for step in ("time_against_eager", "time_cell", "pinning_during_calls", "profile_kernels", "crosscheck_cell",
                 "gemm_libraries", "steady_memory", "check_after_timing"):
        monkeypatch.setattr(worker, step, never)
    CountingCompiled.calls = 0
    spec = tiny_spec("counting", tmp_path, threads=1, coverage_only=True)
    assert spec.coverage_only and not spec.count_work
    cell = CellMeasurement.from_json(worker.measure_cell(spec).to_json()).to_dict()
    assert cell["status"] == "ok" and cell["numerics_ok"] is True and cell["compile_s"] > 0
    assert list(cell["compile_phases"]) == ["wrap", "first_call"]
    assert CountingCompiled.calls == 1
    assert all(cell[name] is None for name in ("latency", "eager_latency", "round_s", "work", "profile"))
    assert set(cell["info"]) == {"float64_reference"}


@pytest.mark.unit
def test_each_backend_classes_its_own_failures_and_the_report_reads_the_verdict_the_worker_recorded():
    from adapters import backend_class
    from adapters.failures import FailureVerdict
    from compare.report import coverage
    from compare.results.protocol import ended
    from compare.results.schema import Cell
    from compare.worker.steps import failure_info

    message = "No conversion rule found for operations: aten.foo"
    info = {"failed_phase": "compile", "exception": "builtins.RuntimeError", "first_error_line": message,
            "error_text": f"RuntimeError: {message}"}
    # OpenVINO's frontend words it so; from a backend whose frontend does not, it names no op
    assert backend_class("openvino").classify_failure(info, message) == FailureVerdict("fail_convert", "aten.foo")
    assert Backend.classify_failure(info, message) == FailureVerdict("fail_compile", message)
    try:
        raise RuntimeError(message)
    except RuntimeError as exc:
        recorded = failure_info(exc, "openvino")
    assert recorded["verdict"] == {"status": "fail_convert", "detail": "aten.foo"}
    # the report reads the recorded verdict, whichever backend's column the cell sits in
    common = dict(workload="mlp", size="small", device="cpu", threads=1, batch=None, dtype="fp32")
    cell = Cell.from_measurement(ended("failed", f"RuntimeError: {message}", info=recorded), backend="ort",
                                 role="candidate", **common)
    assert coverage.failure_status(cell) == ("fail_convert", "aten.foo")


def test_a_failed_cell_of_a_hand_written_workload_is_in_the_matrix_without_a_reproducer(tmp_path):
    """A coverage-only run of built-in modules has the matrix too: a cell that fails is
    classified, and no reproducer is linked or written for a module no script rebuilds."""
    from compare.report import coverage
    from compare.report.outputs import write_outputs
    from compare.results.schema import RunResults

    results = RunResults.load(_coverage_results(tmp_path))
    assert coverage.applies(results)
    records = {(r["model"], r["backend"]): r for r in coverage.matrix(results)}
    assert records[("mlp", "ort")]["status"] == "fail_convert" and records[("mlp", "eager")]["status"] == "pass"
    assert coverage.reproducer_paths(list(records.values())) == {}
    write_outputs(results, tmp_path, record=False, reports=True)
    assert not (tmp_path / "reproducers").exists()
    summary = (tmp_path / "summary.md").read_text()
    assert "| mlp | pass | fail_convert: aten.foo |" in summary and "coverage only: no timing" in summary


def _coverage_results(tmp_path):
    """A coverage-only run's results.json, as the worker and runner write them: eager ok and
    untimed, ORT failed in its convert phase."""
    from compare.harness.run_config import RunConfig
    from compare.results.protocol import ended
    from compare.results.schema import Cell, RunResults

    config = RunConfig(backends=["eager", "ort"], workloads=["mlp"], size="small", coverage_only=True,
                       processes=1, interleave=False, noise_probe_s=0.0)
    common = dict(workload="mlp", size="small", device="cpu", threads=1, batch=None, dtype="fp32")
    ok = CellMeasurement(status="ok", compile_s=0.01, numerics_ok=True, max_abs_err=0.0, numerics_draws=1)
    failed = ended("failed", "ConversionError: Unsupported FX nodes: {'aten.foo': ['no ONNX function']}",
                   info={"failed_phase": "convert", "exception": "torch.onnx._internal.exporter.ConversionError",
                         "first_error_line": "Unsupported FX nodes: {'aten.foo': ['no ONNX function']}"})
    results = RunResults(environment={"threads": 1, "cores": 2}, config=config.to_dict(), run_id="cov", started="now",
                         cells=[Cell.from_measurement(ok, backend="eager", role="reference", **common),
                                Cell.from_measurement(failed, backend="ort", role="candidate", **common)])
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results.to_dict()))
    return path
