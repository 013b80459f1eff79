"""ExecuTorch with XNNPACK: two graphs at small shapes (all five in the slow tier), its delegation, its threads,
and a workload it cannot lower failing its own cell."""
import importlib.util

import pytest

from conftest import FAST, FIXTURES, load_results, run_cli

needs_executorch = pytest.mark.skipif(importlib.util.find_spec("executorch") is None, reason="executorch not installed")


@needs_executorch
# Two graphs (a GEMM, a convolution) in the default tier; all five in the slow tier
@pytest.mark.parametrize("workloads", ["mlp,conv", pytest.param("all", marks=pytest.mark.slow)])
def test_executorch_small_workloads(tmp_path, workloads):
    proc = run_cli("--backends", "executorch", "--size", "small",
                   *([] if workloads == "all" else ["--workloads", workloads]), *FAST, "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cells = [c for c in load_results(tmp_path)["cells"] if c["backend"] == "executorch"]
    assert len(cells) == (5 if workloads == "all" else 2)
    for c in cells:
        assert c["status"] == "ok" and c["numerics_ok"] is True, c
        assert set(c["compile_phases"]) == {"export", "lower", "serialize", "load", "first_call"}
        # XNNPACK's threadpool, as it reports its own size, has the run's threads
        assert c["info"]["xnnpack_threadpool_threads_observed"] == c["threads"]
        delegation = c["info"]["delegation"]
        assert delegation["delegated_ops"] > 0 and 0 < delegation["delegated_share"] <= 1
        assert isinstance(delegation["portable_fallback"], dict)
        assert c["info"]["pte_bytes"] > 0
    libraries = {c["workload"]: c["gemm_library"] for c in cells}
    assert libraries["mlp"] == {"gemm": "XNNPACK"} and libraries["conv"] == {"conv": "XNNPACK"}


@needs_executorch
def test_a_workload_it_cannot_lower_fails_its_own_cell_in_one_line(tmp_path):
    proc = run_cli("--backends", "executorch", "--workload-file", FIXTURES / "unlowerable_workloads.py",
                   "--workloads", "bessel", "--size", "small", *FAST, "--output-dir", tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # a cell failed, the run finished
    cells = {c["backend"]: c for c in load_results(tmp_path)["cells"]}
    assert cells["eager"]["status"] == "ok"
    failed = cells["executorch"]
    assert failed["status"] == "failed" and "\n" not in failed["error"] and "[...]" not in failed["error"]
    assert "SpecViolationError" in failed["error"] and "special_bessel_j0" in failed["error"], failed["error"]
    assert "not in Core ATen opset" in failed["error"], failed["error"]


@pytest.mark.unit
def test_a_missing_executorch_is_unavailable_with_the_install_hint(monkeypatch):
    from adapters.executorch import ExecutorchBackend

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("executorch") else real(name, *a))
    ok, reason = ExecutorchBackend().available()
    assert not ok and "'executorch" in reason and "pip install -e '.[executorch]'" in reason


@pytest.mark.unit
def test_cuda_status_is_stated():
    from adapters.executorch import ExecutorchBackend

    ok, reason = ExecutorchBackend().available("cuda")
    assert not ok and "no CUDA target" in reason


@pytest.mark.unit
def test_the_lowering_reason_is_its_first_line_that_says_something():
    from adapters.executorch import lowering_reason

    exc = ValueError("\nOperator aten.x is not in Core ATen opset.\nThere are a few things to try:")
    assert lowering_reason(exc) == "ValueError: Operator aten.x is not in Core ATen opset."


@pytest.mark.unit
def test_gemm_library_names_the_portable_fallback_when_a_gemm_falls_back():
    from adapters.executorch import delegated_libraries, op_kind

    assert op_kind("aten_linear_default") == "gemm" and op_kind("aten_convolution_default") == "conv"
    assert op_kind("aten_sin_default") is None
    assert delegated_libraries({"aten_sin_default": 1}, {"gemm", "conv"}) == {"conv": "XNNPACK", "gemm": "XNNPACK"}
    assert delegated_libraries({"aten_bmm_default": 2}, {"gemm"}) == {"gemm": "ExecuTorch portable kernels + XNNPACK"}
