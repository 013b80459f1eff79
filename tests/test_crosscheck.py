"""--crosscheck: each cell's artifact re-timed by its backend's own benchmark tool, the
ratio to dlcompare's median, the flag beyond the tolerance, and the tools themselves; and
the library each cell's GEMMs ran in."""
import importlib.util

import pytest

from adapters.base import Compiled
from adapters.libraries import from_aoti_package, from_onnx_ops, from_openvino_layers, from_torch_ops, torch_blas
from adapters.profiling import CrossCheck, ProfileUnavailable
from compare.harness.pooling import pooled_crosscheck
from compare.report.crosscheck import crosscheck_frame
from compare.report.text import fmt_status
from compare.results.derived import fill_derived
from compare.results.schema import Cell, LatencyStats, RunResults
from compare.worker.steps import crosscheck_cell
from conftest import FAST, FIXTURES, load_results, run_cli, tiny_spec


class _FakeTool(Compiled):
    """A compiled model whose own tool reads ``tool_ms``."""

    def __init__(self, tool_ms):
        self.tool_ms = tool_ms

    def run(self, prepared):
        return prepared

    def crosscheck(self, prepared, seconds):
        if self.tool_ms is None:
            raise ProfileUnavailable("no tool here")
        return CrossCheck("fake-benchmark", self.tool_ms, 10)


@pytest.mark.unit
def test_the_ratio_is_the_tools_median_over_the_process_own(tmp_path):
    spec = tiny_spec("eager", tmp_path, crosscheck=True)
    assert crosscheck_cell(_FakeTool(1.2), None, 1.0, spec)["ratio"] == pytest.approx(1.2)
    assert crosscheck_cell(_FakeTool(None), None, 1.0, spec) == {"unavailable": "no tool here"}
    assert crosscheck_cell(_FakeTool(1.2), None, 1.0, tiny_spec("eager", tmp_path)) is None  # only when asked for
    pooled = pooled_crosscheck([crosscheck_cell(_FakeTool(ms), None, 1.0, spec) for ms in (0.9, 1.3, 1.25)])
    assert pooled["ratio"] == pytest.approx(1.25) and pooled["processes"] == 3 and pooled["tool"] == "fake-benchmark"
    # one process without a tool: the cell says so instead of a ratio over the others
    assert "unavailable" in pooled_crosscheck([crosscheck_cell(_FakeTool(ms), None, 1.0, spec) for ms in (0.9, None)])


@pytest.mark.unit
def test_the_gemm_library_is_read_from_the_ops_that_ran():
    assert from_torch_ops({"aten::linear", "aten::addmm", "aten::relu"}, "MKL") == {"gemm": "MKL"}
    assert from_torch_ops({"mkl::_mkl_linear", "mkldnn::_linear_pointwise"}, "MKL") == {"gemm": "MKL + oneDNN"}
    assert from_torch_ops({"aten::mkldnn_convolution", "aten::mm"}, "BLAS (not MKL)") == {
        "conv": "oneDNN", "gemm": "BLAS (not MKL)"}
    assert from_onnx_ops({"FusedMatMul", "Add", "Conv"}) == {"conv": "MLAS", "gemm": "MLAS"}
    assert from_onnx_ops({"Add", "Relu"}) == {}
    assert from_openvino_layers([("FullyConnected", "brgemm_avx512_f32"), ("Eltwise", "jit")]) == {
        "gemm": "OpenVINO CPU plugin (brgemm_avx512_f32)"}
    assert from_aoti_package(FIXTURES / "aoti_wrapper.pt2") == {"conv": "oneDNN", "gemm": "oneDNN"}


@pytest.mark.unit
def test_a_cell_beyond_the_tolerance_is_flagged_in_the_table():
    stats = LatencyStats.from_ms([1.0, 1.0, 1.0], 1)

    def cell(backend, ratio):
        return Cell.from_flat(workload="mlp", backend=backend, status="ok", latency=stats, eager_latency=stats,
                    crosscheck={"tool": "fake-benchmark", "median_ms": ratio, "ratio": ratio})

    results = RunResults(environment={}, config={}, cells=[cell("ort", 1.05), cell("iree", 1.3)])
    fill_derived(results)
    near, far = results.cells
    assert near.instruments.crosscheck["flagged"] is False and far.instruments.crosscheck["flagged"] is True
    assert "own tool +30%" in fmt_status(far) and "own tool" not in fmt_status(near)
    assert list(crosscheck_frame(results)["tool / dlcompare"]) == ["1.05", "1.30 !"]


@pytest.mark.slow  # six compilers and their tools: the unit tests above keep the logic in the default tier
@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("onnxruntime", "openvino", "iree.runtime")),
                    reason="ort, openvino and iree are needed")
def test_every_backend_own_tool_times_the_same_artifact_and_names_its_gemm_library(tmp_path):
    backends = "inductor,aot-inductor,ort,openvino,iree,tvm-untuned"
    # One thread: a 0.05 ms call on two threads beside the other xdist worker's compiles
    # measured 3.2 ms in the run and 0.07 ms in the tool (CI at 7fc7398), a thread waiting
    # for a descheduled sibling, not a different artifact.
    proc = run_cli("--backends", backends, "--workloads", "mlp", "--size", "small", *FAST, "--crosscheck",
                   "--threads", "1", "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tools = {"eager": "torch.utils.benchmark.Timer", "inductor": "torch.utils.benchmark.Timer",
             "aot-inductor": "torch.utils.benchmark.Timer", "ort": "onnxruntime benchmark_helper loop (timeit.repeat of session.run)",
             "openvino": "benchmark_app", "iree": "iree-benchmark-module", "tvm-untuned": "tvm time_evaluator"}
    cells = {c["backend"]: c for c in load_results(tmp_path)["cells"]}
    for backend, tool in tools.items():
        check = cells[backend]["crosscheck"]
        assert check.get("tool") == tool, (backend, check)
        # the same artifact on the same inputs: the same order of magnitude (the bound, ±15 %,
        # is a property of an idle machine, shown in the table, not asserted here)
        assert 0.2 < check["ratio"] < 5, (backend, check)
    gemm = {backend: cells[backend]["gemm_library"]["gemm"] for backend in tools}
    assert gemm["eager"] == torch_blas() and gemm["ort"] == "MLAS" and gemm["tvm-untuned"] == "TVM-generated"
    assert gemm["iree"].startswith("IREE") and gemm["openvino"].startswith("OpenVINO CPU plugin (")
    # Inductor with freezing packs fp32 linears for MKL or oneDNN; AOTInductor calls oneDNN
    assert {gemm["inductor"], gemm["aot-inductor"]} <= {"MKL", "oneDNN", "BLAS (not MKL)"}, gemm
    assert "conv" not in cells["ort"]["gemm_library"]  # the MLP has no convolution
    report = run_cli("crosscheck", tmp_path)
    assert "iree-benchmark-module" in report.stdout and report.returncode in (0, 3), report.stdout + report.stderr


@pytest.mark.unit
def test_the_summary_names_each_backend_gemm_library():
    from compare.report.text import libraries_line

    cells = [Cell.from_flat(workload="mlp", backend="eager", status="ok", gemm_library={"gemm": "MKL"}),
             Cell.from_flat(workload="conv", backend="eager", status="ok", gemm_library={"conv": "oneDNN"}),
             Cell.from_flat(workload="mlp", backend="ort", status="ok", gemm_library={"gemm": "MLAS"})]
    line = libraries_line(RunResults(environment={}, config={}, cells=cells))
    assert line == "GEMM and convolution libraries: eager conv oneDNN, gemm MKL; ort gemm MLAS."
