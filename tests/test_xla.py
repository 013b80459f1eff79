"""XLA:CPU through JAX: two graphs at small shapes (all five in the slow tier), its threads, its HLO counts."""
import importlib.util

import pytest

from conftest import FAST, load_results, run_cli

needs_xla = pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("jax", "torchax")),
                               reason="jax or torchax not installed")


@needs_xla
# Two graphs (a GEMM, a convolution) in the default tier; all five in the slow tier
@pytest.mark.parametrize("workloads", ["mlp,conv", pytest.param("all", marks=pytest.mark.slow)])
def test_xla_small_workloads(tmp_path, workloads):
    proc = run_cli("--backends", "xla", "--size", "small",
                   *([] if workloads == "all" else ["--workloads", workloads]), "--explain", *FAST, "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cells = [c for c in load_results(tmp_path)["cells"] if c["backend"] == "xla"]
    assert len(cells) == (5 if workloads == "all" else 2)
    for c in cells:
        assert c["status"] == "ok" and c["numerics_ok"] is True, c
        assert set(c["compile_phases"]) == {"export", "convert", "lower", "compile", "first_call"}
        # XLA's own intra-op pool, counted by its threads' names, has the run's threads
        assert c["info"]["xla_pool_threads_observed"] == c["threads"] == c["settings"]["intra_op_threads"]
        assert c["settings"]["jax_default_matmul_precision"] == "highest" and c["settings"]["jax_enable_x64"] is False
        assert c["info"]["hlo"]["fusions"] >= 1 and c["info"]["hlo"]["entry_instructions"] >= 1
        # --explain: XLA's thunks from JAX's own profiler, each one per call at most a few times
        profile = c["profile"]
        assert profile["instrument"].startswith("jax.profiler") and profile["kernels"], (c["workload"], profile)
        assert all(k["ms"] > 0 and k["calls"] >= 1 for k in profile["kernels"]), profile["kernels"]
    mlp_kernels = {k["name"]: k for k in next(c for c in cells if c["workload"] == "mlp")["profile"]["kernels"]}
    assert any(k["category"] == "matmul/conv" for k in mlp_kernels.values()), mlp_kernels
    libraries = {c["workload"]: c["gemm_library"] for c in cells}
    assert set(libraries["mlp"]) == {"gemm"} and set(libraries["conv"]) == {"conv"}, libraries


@pytest.mark.unit
def test_a_missing_jax_is_unavailable_with_the_install_hint(monkeypatch):
    from adapters.xla import XlaBackend

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jax" else real(name, *a))
    ok, reason = XlaBackend().available()
    assert not ok and "'jax'" in reason and "pip install -e '.[xla]'" in reason


@pytest.mark.unit
def test_cuda_status_is_stated():
    from adapters.xla import XlaBackend

    ok, reason = XlaBackend().available("cuda")
    assert not ok and "CUDA plugin" in reason


@pytest.mark.unit
def test_hlo_counts_read_the_entry_computation():
    from adapters.xla import hlo_counts

    hlo = """HloModule m

fused_computation {
  p = f32[4] parameter(0)
  ROOT t = f32[4] tanh(p)
}

ENTRY main {
  a = f32[4] parameter(0)
  f = f32[4] fusion(a), kind=kLoop, calls=fused_computation
  d = f32[4,4] custom-call(f), custom_call_target="matmul"
  ROOT tuple = (f32[4]) tuple(f)
}
"""
    assert hlo_counts(hlo) == {"entry_instructions": 3, "fusions": 1, "custom_calls": 1, "dots_outside_fusions": 0}


HLO_WITH_A_LIBRARY_FUSION = """HloModule jit_f, entry_computation_layout={(f32[4,32]{1,0})->f32[4,64]{1,0}}

%fused_computation (param_0: f32[4,32], param_1: f32[32,64]) -> f32[4,64] {
  ROOT %dot_general.0 = f32[4,64]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main.1 (x: f32[1,16,16,8]) -> f32[1,16,16,8] {
  %ynn_fusion = f32[4,64]{1,0} fusion(%x, %c), kind=kCustom, calls=%fused_computation, """ \
    """backend_config={"fusion_config":{"kind":"__ynn_fusion"}}
  ROOT %convolution = f32[1,16,16,8]{3,2,1,0} convolution(%x, %w), window={size=3x3 pad=1_1x1_1}
}
"""


@pytest.mark.unit
def test_gemm_library_is_read_from_the_fusion_that_calls_the_dot():
    from adapters.xla import XLA_RUNTIME, hlo_libraries

    assert hlo_libraries(HLO_WITH_A_LIBRARY_FUSION) == {"gemm": "YNNPACK", "conv": XLA_RUNTIME}
    unfused = HLO_WITH_A_LIBRARY_FUSION.replace("__ynn_fusion", "__other_fusion")
    assert hlo_libraries(unfused) == {"gemm": XLA_RUNTIME, "conv": XLA_RUNTIME}


@pytest.mark.unit
def test_thunks_are_read_from_xla_threads_and_grouped_per_call():
    from types import SimpleNamespace as NS

    from adapters.xla import kernels_per_call, thunk_events

    def line(name, *events):
        return NS(name=name, events=[NS(name=n, duration_ns=ns) for n, ns in events])

    plane = NS(name="/host:CPU", lines=[
        line("python", ("PjitFunction(f)", 9_000_000)),  # Python's dispatch, not a thunk
        line("tf_XLAPjRtCpuClient/1", ("ynn_fusion", 2_000_000), ("end: ynn_fusion", 1_000),
             ("broadcast_add_fusion", 400_000), ("ynn_fusion", 2_000_000), ("dot.3", 100_000)),
        line("tf_XLAEigen/2", ("ThreadpoolListener::StartRegion", 0), ("broadcast_add_fusion", 600_000))])
    events = thunk_events(NS(planes=[NS(name="/host:metadata", lines=[]), plane]))
    assert sorted(n for n, _ in events) == ["broadcast_add_fusion", "broadcast_add_fusion", "dot.3", "ynn_fusion",
                                            "ynn_fusion"]
    kernels = {k.name: k for k in kernels_per_call(events, calls=2)}
    assert kernels["ynn_fusion"].calls == 1 and kernels["ynn_fusion"].ms == pytest.approx(2.0)
    assert kernels["broadcast_add_fusion"].ms == pytest.approx(0.5)
    assert kernels["ynn_fusion"].category == kernels["dot.3"].category == "matmul/conv"
    assert kernels["broadcast_add_fusion"].category == "pointwise"
