"""Precision modes the hardware decides: fp32 against TF32 on CUDA (--dtype tf32), and bf16
native or emulated on a CPU. Checked without a GPU: the settings each worker makes, the
cells a backend without TF32 refuses, and the conditions the report states."""
import argparse
from pathlib import Path

import pytest

from adapters import get_backend
from adapters.base import CompileContext
from compare.config import UsageError, _check_options
from compare.measure.numerics import DTYPE_NAMES, numerics_verdict, tolerance_for
from compare.report.text import precision_text
from compare.results.schema import RunResults
from compare.worker import steps
from conftest import tiny_spec

pytestmark = pytest.mark.unit


def _args(dtype: list[str], device: str) -> argparse.Namespace:
    return argparse.Namespace(noise_probe=0.0, cuda_arch=None, executor="local", dtype=dtype, device=device)


def test_tf32_is_a_dtype_of_its_own_on_cuda_and_a_usage_error_on_the_cpu():
    assert "tf32" in DTYPE_NAMES
    _check_options(_args(["fp32", "tf32"], "cuda"))
    with pytest.raises(UsageError, match="--device cuda"):
        _check_options(_args(["tf32"], "cpu"))


@pytest.mark.parametrize("dtype, matmul, cudnn", [("fp32", "highest", False), ("tf32", "high", True),
                                                  ("bf16", "highest", False)])
def test_each_worker_sets_torchs_fp32_math_from_the_cells_dtype(dtype, matmul, cudnn):
    import torch

    torch.backends.cudnn.allow_tf32 = not cudnn  # the opposite, so the call must change it
    torch.set_float32_matmul_precision("medium")
    try:
        steps.float32_math(torch, dtype)
        assert torch.get_float32_matmul_precision() == matmul and torch.backends.cudnn.allow_tf32 is cudnn
    finally:
        steps.float32_math(torch, "fp32")


def test_a_backend_without_tf32_math_refuses_the_cell_and_the_torch_backends_and_ort_take_it(tmp_path: Path):
    from adapters import BackendUnavailable

    spec = tiny_spec("eager", tmp_path, dtype="tf32")
    for name in ("eager", "inductor", "aot-inductor", "ort"):
        steps.refuse_tf32(spec, get_backend(name))
    for name in ("openvino", "tvm-untuned", "iree"):
        with pytest.raises(BackendUnavailable, match="no TF32 math mode"):
            steps.refuse_tf32(spec, get_backend(name))
    steps.refuse_tf32(tiny_spec("iree", tmp_path, dtype="fp32"), get_backend("iree"))


@pytest.mark.parametrize("tf32, flag", [(False, "0"), (True, "1")])
def test_ort_states_use_tf32_both_ways_on_cuda(tf32, flag, tmp_path: Path):
    ort = get_backend("ort")
    ctx = CompileContext(workload_name="w", workload_key="w", device="cuda", threads=1, work_dir=tmp_path, tf32=tf32)
    assert ort.providers(ctx) == [("CUDAExecutionProvider", {"use_tf32": flag}), "CPUExecutionProvider"]
    cpu = CompileContext(workload_name="w", workload_key="w", device="cpu", threads=1, work_dir=tmp_path)
    assert ort.providers(cpu) == ["CPUExecutionProvider"]


def test_a_tf32_cell_is_judged_as_a_reduced_precision_and_float32_outputs_keep_fp32s_tolerance():
    assert tolerance_for("float32") == (1e-4, 1e-4)
    checks = {"vs_eager": {"ok": False, "error": "beyond 1e-4"}, "vs_fp64": {"max_abs": 3e-4},
              "eager_vs_fp64": {"max_abs": 2e-4}}
    assert numerics_verdict("tf32", checks, output_scale=1.0)["ok"]  # within 4x eager's own TF32 error
    assert not numerics_verdict("fp32", checks, output_scale=1.0)["ok"]  # fp32: beyond tolerance, not closer
    far = {**checks, "vs_fp64": {"max_abs": 5e-3}}
    assert not numerics_verdict("tf32", far, output_scale=1.0)["ok"]


def _run(device: str, dtypes: list[str], flags: list[str]) -> RunResults:
    return RunResults(environment={"cpu_flags": flags}, config={"device": device, "dtypes": dtypes}, cells=[],
                      run_id="r", started="r")


def test_the_conditions_say_how_fp32_tf32_and_bf16_were_computed():
    cuda = precision_text(_run("cuda", ["fp32", "tf32"], []))
    assert "fp32 is IEEE fp32" in cuda and "cuDNN TF32 off" in cuda and "tf32: fp32 tensors, TF32 tensor cores" in cuda
    assert precision_text(_run("cpu", ["fp32"], ["avx2"])) == ""
    assert precision_text(_run("cpu", ["bf16"], ["avx2", "fma"])).endswith(
        "bf16 emulated: this CPU has no AVX512-BF16 or AMX instructions")
    assert precision_text(_run("cpu", ["fp32", "bf16"], ["avx512_bf16", "avx512f", "amx_bf16"])) == \
        "; bf16 native (amx_bf16, avx512_bf16)"
