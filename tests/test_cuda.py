"""CUDA: code generation is checked on every machine; running needs a GPU."""
import importlib.util

import pytest
import torch

from adapters import CompileContext, get_backend
from conftest import FIXTURES, load_results, run_cli
from workloads import build_model, load_workload_file, make_inputs

HAS_GPU = torch.cuda.is_available()
TINY = next(w for w in load_workload_file(FIXTURES / "tiny_workloads.py") if w.name == "tiny_linear")


def _ctx(tmp_path, arch, backend):
    options = get_backend(backend).options_type.from_options({"cuda_arch": arch})
    return CompileContext(workload_name="tiny_linear", workload_key=TINY.key("small"), device="cuda", threads=1,
                          work_dir=tmp_path, options=options)


def _tiny():
    return build_model(TINY, "small"), make_inputs(TINY.input_specs("small"))


@pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="apache-tvm not installed")
def test_tvm_generates_cuda_code_without_a_gpu(tmp_path):
    model, inputs = _tiny()
    ctx = _ctx(tmp_path, "sm_80", "tvm-untuned")
    executable = get_backend("tvm-untuned").build(model, inputs, ctx)
    assert executable is not None
    assert ctx.info["target"] == {"kind": "cuda", "arch": "sm_80"}
    assert ctx.phases["build"] > 0


@pytest.mark.skipif(importlib.util.find_spec("iree.turbine") is None, reason="iree-turbine not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_iree_compiles_a_cuda_vmfb_without_a_gpu(tmp_path, arch):
    model, inputs = _tiny()
    ctx = _ctx(tmp_path, arch, "iree")
    vmfb = tmp_path / "cuda.vmfb"
    get_backend("iree")._export_and_compile(model, inputs, ctx, vmfb)
    assert vmfb.stat().st_size > 1000
    assert ctx.info["cuda_arch"].startswith("sm_")
    if ctx.info["cuda_arch"] != arch:  # the sm_90 upstream bug: the fallback is stated
        assert arch in ctx.info["cuda_arch_fallback"]


def test_capability_matrix_explains_itself():
    proc = run_cli("list", "--device", "cuda")
    assert proc.returncode == 0
    for name in ("eager", "inductor", "ort", "tvm", "iree"):
        assert name in proc.stdout
    from adapters import get_backend

    for name in ("openvino", "openvino-dynamo", "aot-inductor"):  # not applicable: listed with the reason
        assert get_backend(name).available("cuda") == (False, f"{name} has no cuda target in dlcompare")
        assert name in proc.stdout
    if not HAS_GPU:
        assert "no CUDA device visible to torch" in proc.stdout


def test_bad_cuda_arch_is_a_usage_error(tmp_path):
    proc = run_cli("--device", "cuda", "--cuda-arch", "ampere", "--output-dir", tmp_path)
    assert proc.returncode == 2 and "--cuda-arch" in proc.stderr


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU behaviour")
def test_cuda_run_without_gpu_reports_unavailable(tmp_path):
    proc = run_cli("--device", "cuda", "--backends", "inductor,ort", "--workloads", "mlp", "--size", "small",
                   "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stderr
    cells = load_results(tmp_path)["cells"]
    assert {c["status"] for c in cells} == {"unavailable"}
    assert all(c["error"] for c in cells)


@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
def test_cuda_inductor_runs_and_agrees(tmp_path):
    proc = run_cli("--device", "cuda", "--backends", "inductor", "--workloads", "mlp", "--size", "small",
                   "--time-budget", "0.3", "--min-samples", "3", "--reference-processes", "1", "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cell = next(c for c in load_results(tmp_path)["cells"] if c["backend"] == "inductor")
    assert cell["status"] == "ok" and cell["numerics_ok"] and cell["info"]["cuda_peak_allocated_mb"] > 0


@pytest.mark.slow
def test_the_gpu_script_runs_in_parts_each_cut_off_at_its_limit_with_its_cells_saved(tmp_path):
    """scripts/gpu_check.sh tried without a GPU (DEVICE=cpu): the listing finishes, the survey
    is cut off at its limit and still writes what it finished, a part with limit 0 is skipped."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "DEVICE": "cpu", "SIZE": "small", "BACKENDS": "inductor", "LIMITS": "60 25 0 0",
           "OUT": str(tmp_path), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", str(root / "scripts" / "gpu_check.sh")], env=env, capture_output=True, text=True,
                          timeout=300)
    parts = (tmp_path / "gpu-check" / "parts.txt").read_text().splitlines()
    assert parts[0].startswith("part list: finished"), proc.stdout + proc.stderr
    assert parts[1].startswith("part survey: cut off at its limit"), parts
    assert parts[2:] == ["part models: skipped (limit 0)", "part llm: skipped (limit 0)"]
    survey = json.loads((tmp_path / "gpu-check" / "survey" / "results.json").read_text())
    assert survey["state"] == "interrupted" and (tmp_path / "gpu-check" / "survey" / "summary.md").exists()
