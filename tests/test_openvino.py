"""OpenVINO (and OpenVINO as a torch.compile backend): real compiles at the small size,
the configuration it reports, its own model cache, its precision rule, its profile."""
import importlib.util

import pytest

from conftest import FAST, load_results, run_cli

pytestmark = pytest.mark.skipif(importlib.util.find_spec("openvino") is None, reason="openvino not installed")


def _cells(out):
    return {(c["workload"], c["backend"]): c for c in load_results(out)["cells"]}


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    out = tmp_path_factory.mktemp("openvino") / "run"
    proc = run_cli("--backends", "openvino,openvino-dynamo", "--workloads", "mlp,norm_residual", "--size", "small",
                   *FAST, "--threads", "2", "--explain", "--output-dir", out, "--no-history")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return _cells(out)


def test_openvino_compiles_runs_and_agrees_with_its_configuration_recorded(cold):
    for workload in ("mlp", "norm_residual"):
        cell = cold[(workload, "openvino")]
        assert cell["status"] == "ok" and cell["numerics_ok"] is True, cell["error"]
        assert list(cell["compile_phases"]) == ["convert", "compile", "first_call"]
        assert cell["import_s"] > 0 and cell["settings"]["PERFORMANCE_HINT"] == "LATENCY"
        observed = cell["info"]["openvino_properties"]  # what OpenVINO itself says it runs with
        assert observed["INFERENCE_NUM_THREADS"] == 2 and observed["NUM_STREAMS"] == 1
        assert observed["INFERENCE_PRECISION_HINT"] == "f32" and observed["PERFORMANCE_HINT"] == "LATENCY"
        assert observed["SCHEDULING_CORE_TYPE"] == "ANY_CORE" and isinstance(observed["ENABLE_CPU_PINNING"], bool)
        assert "ENABLE_CPU_PINNING" not in cell["settings"]  # OpenVINO's own default, read back above
        assert cell["info"]["thread_pinning"]["threads"] >= 1


def test_pinning_is_openvinos_unless_switched():
    from pathlib import Path

    from adapters.base import CompileContext
    from adapters.openvino import OpenVinoBackend, OpenVinoOptions

    def config(pinning):
        ctx = CompileContext("mlp", "k", "cpu", 2, Path("."), options=OpenVinoOptions(openvino_pinning=pinning))
        return OpenVinoBackend().config(ctx, "fp32")

    assert "ENABLE_CPU_PINNING" not in config("default")
    assert config("on")["ENABLE_CPU_PINNING"] is True and config("off")["ENABLE_CPU_PINNING"] is False


def test_openvino_profile_names_the_plugin_layers(cold):
    profile = cold[("norm_residual", "openvino")]["profile"]
    assert profile["instrument"].startswith("openvino performance counters")
    kinds = {k["name"].split(":")[0]: k["category"] for k in profile["kernels"]}
    assert kinds.get("MVN") == "reduction/norm", kinds  # LayerNorm as the CPU plugin runs it
    assert 0 < sum(k["ms"] for k in profile["kernels"]) <= 2 * profile["profiled_call_ms"]


def test_openvino_as_a_torch_compile_backend_runs(cold):
    cell = cold[("mlp", "openvino-dynamo")]
    assert cell["status"] == "ok" and cell["numerics_ok"] is True, cell["error"]
    assert list(cell["compile_phases"]) == ["compile"] and cell["settings"]["frontend"].startswith("torch.compile")


@pytest.mark.slow  # default tier: 20 minutes on 2 cores; CI runs it in the slow tier
def test_openvino_warm_second_run_loads_its_own_cache(tmp_path):
    store = tmp_path / "store"
    runs = []
    for name in ("warm1", "warm2"):
        proc = run_cli("--backends", "openvino", "--workloads", "mlp", "--size", "small", *FAST, "--cache", "warm",
                       "--tuning-logs", store, "--output-dir", tmp_path / name, "--no-history")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        runs.append(_cells(tmp_path / name)[("mlp", "openvino")])
    first, second = runs
    assert first["cache"] == "miss" and first["info"]["cache_evidence"]["loaded_from_cache"] is False
    evidence = second["info"]["cache_evidence"]
    assert second["cache"] == "hit" and evidence["loaded_from_cache"] is True and evidence["loaded_from_store"] is True
    assert evidence["cache_blobs"] and second["compile_phases"]["convert"] == 0.0
    assert second["numerics_ok"] is True


def test_reduced_precision_follows_the_cpu_plugin_capabilities(tmp_path):
    import openvino as ov

    capabilities = list(ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    proc = run_cli("--backends", "openvino", "--workloads", "mlp", "--size", "small", *FAST, "--dtype", "bf16",
                   "--output-dir", tmp_path / "run", "--no-history")
    cell = next(c for c in load_results(tmp_path / "run")["cells"] if c["backend"] == "openvino")
    if "BF16" in capabilities:
        hint = cell["info"]["openvino_properties"]["INFERENCE_PRECISION_HINT"]
        assert cell["status"] == "ok" and hint == "bf16", hint
    else:  # unavailable, in OpenVINO's own words, and the run still succeeds
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert cell["status"] == "unavailable" and "OPTIMIZATION_CAPABILITIES" in cell["error"]
        assert ", ".join(capabilities) in cell["error"]


class _Core:
    """OpenVINO's Core as far as the precision rule reads it, with chosen capabilities."""

    def __init__(self, *capabilities):
        self.capabilities = capabilities

    def get_property(self, device, name):
        assert (device, name) == ("CPU", "OPTIMIZATION_CAPABILITIES")
        return list(self.capabilities)


@pytest.mark.unit
@pytest.mark.parametrize("capabilities", [("FP32", "BF16", "INT8"), ("FP32", "INT8")], ids=["bf16-cpu", "avx2-cpu"])
def test_the_precision_rule_on_a_cpu_with_and_without_bf16(capabilities):
    """Both branches on any machine: the capability is faked where this CPU lacks it."""
    from adapters import BackendUnavailable
    from adapters.openvino import check_precision

    assert check_precision(_Core(*capabilities), "fp32") == "fp32"
    if "BF16" in capabilities:
        assert check_precision(_Core(*capabilities), "bf16") == "bf16"
    else:
        with pytest.raises(BackendUnavailable, match="offers FP32, INT8 on this CPU, not BF16"):
            check_precision(_Core(*capabilities), "bf16")


@pytest.mark.unit
def test_properties_are_recorded_as_plain_values():
    import openvino as ov
    from openvino import properties

    from adapters.openvino import plain_property

    assert plain_property(ov.Type.bf16) == "bf16" and plain_property(ov.Type.f32) == "f32"
    assert plain_property(properties.hint.SchedulingCoreType.ANY_CORE) == "ANY_CORE"
    assert plain_property(properties.hint.ExecutionMode.PERFORMANCE) == "PERFORMANCE"
    assert plain_property(True) is True and plain_property(2) == 2 and plain_property("LATENCY") == "LATENCY"


@pytest.mark.unit
def test_a_missing_openvino_is_unavailable_with_the_install_hint(monkeypatch):
    from adapters.openvino import OpenVinoBackend

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "openvino" else real(name, *a))
    ok, reason = OpenVinoBackend().available()
    assert not ok and "pip install -e '.[openvino]'" in reason


@pytest.mark.unit
def test_layer_categories():
    from adapters.openvino import layer_category

    assert layer_category("FullyConnected", "gemm_mlas_f32") == "matmul/conv"
    assert layer_category("Convolution", "jit_avx2_f32") == "matmul/conv"
    assert layer_category("MVN", "jit_avx2_f32") == "reduction/norm"
    assert layer_category("Softmax", "jit_avx2_f32") == "reduction/norm"
    assert layer_category("Reorder", "ref_any_f32") == "data movement"
    assert layer_category("Subgraph", "jit_avx2_f32") == "pointwise"


@pytest.mark.parametrize("allocator", ["tcmalloc", pytest.param("jemalloc", marks=pytest.mark.slow)])
def test_openvino_runs_under_a_preloaded_allocator(tmp_path, allocator):
    """OpenVINO's TBB deep-binds hwloc, which then freed tcmalloc's memory with glibc's free
    (an abort in compile_model); the backend's environment turns the deep binding off."""
    from compare.harness.allocators import find_library

    if find_library(allocator) is None:
        pytest.skip(f"{allocator} is not installed")
    proc = run_cli("--backends", "openvino", "--workloads", "mlp", "--size", "small", *FAST, "--allocator", allocator,
                   "--output-dir", tmp_path / "run", "--no-history")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cell = next(c for c in load_results(tmp_path / "run")["cells"] if c["backend"] == "openvino")
    assert cell["status"] == "ok" and cell["allocator"] == allocator and cell["settings"]["TBB_ENABLE_SANITIZERS"] == "1"


# slow tier (CI runs it): 40 s of the default suite's 15 minutes
@pytest.mark.slow
def test_the_decode_step_holds_its_kv_cache_as_state_and_generates_eagers_tokens(tmp_path):
    """--openvino-llm-state stateful (the default): MakeStateful on the step's cache inputs and
    outputs; the tokens agree with eager's as the explicit step's do (a variant in the same run)."""
    out = tmp_path / "run"
    proc = run_cli("--workloads", "llama_decode", "--size", "small", "--backends",
                   "openvino,openvino:openvino-llm-state=explicit", *FAST, "--output-dir", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = {c["backend"]: c for c in load_results(out)["cells"]}
    stateful, explicit = cells["openvino"], cells["openvino:openvino-llm-state=explicit"]
    for cell in (stateful, explicit):
        assert cell["status"] == "ok" and cell["numerics_ok"], (cell["error"], cell["numerics_error"])
        assert cell["decode"]["token_ids"] == cell["decode"]["eager_token_ids"]
    assert stateful["info"]["decode"]["llm_state"].startswith("stateful")
    assert "llm_state" not in explicit["info"]["decode"] and "make_stateful" not in str(explicit["compile_phases"])
