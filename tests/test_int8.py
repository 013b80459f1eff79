"""--dtype int8: each backend's own quantizer on the same calibration data, accuracy against
fp32 eager judged by the int8 tolerance, and the int8 table."""
import dataclasses
import importlib.util
import math
import os

import pytest

from conftest import FAST, FIXTURES, load_results, run_cli

PLUGIN = FIXTURES / "plugin"
needs_executorch = pytest.mark.skipif(importlib.util.find_spec("executorch") is None, reason="executorch not installed")


def _badquant_env(tmp_path):
    """The broken-quantizer test backend, registered as pip would register it."""
    site = tmp_path / "site" / "dlcompare_badquant-0.1.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Metadata-Version: 2.1\nName: dlcompare-badquant\nVersion: 0.1\n")
    (site / "entry_points.txt").write_text("[dlcompare.backends]\nbadquant = dlcompare_badquant_backend:BadQuantBackend\n")
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(PLUGIN)])}


# ----------------------------------------------------------------------------- unit


@pytest.mark.unit
def test_the_int8_tolerance_is_its_own_and_a_crude_quantization_passes_it_but_not_fp32s():
    import torch

    from compare.measure.accuracy import INT8_TOLERANCE, draw_accuracy, int8_verdict, summarize_draws
    from compare.measure.numerics import compare_outputs

    gen = torch.Generator().manual_seed(0)
    fp32 = torch.randn(16, 10, generator=gen)
    scale = fp32.abs().max() / 127
    int8 = torch.round(fp32 / scale) * scale  # what an honest int8 path costs
    assert not compare_outputs([int8], [fp32])["ok"]  # fp32's tolerance would fail it
    accuracy = summarize_draws([draw_accuracy([int8], [fp32], logits=True)])
    verdict = int8_verdict(accuracy)
    assert verdict["ok"] and verdict["tolerance"] == INT8_TOLERANCE
    assert accuracy["top1_rows"] == 16 and accuracy["cosine_min"] > 0.999
    broken = torch.round(fp32 / (fp32.abs().max())) * fp32.abs().max()  # ternary
    bad = int8_verdict(summarize_draws([draw_accuracy([broken], [fp32], logits=True)]))
    assert not bad["ok"] and "int8" in bad["error"]
    swapped = int8_verdict(summarize_draws([draw_accuracy([fp32.flip(1)], [fp32], logits=True)]))
    assert not swapped["ok"] and "top-1" in swapped["error"]
    nan = summarize_draws([draw_accuracy([torch.full_like(fp32, math.nan)], [fp32], logits=False)])
    assert not int8_verdict(nan)["ok"]


@pytest.mark.unit
def test_top1_decides_only_a_classifiers_int8_verdict():
    import torch

    from compare.measure.accuracy import draw_accuracy, int8_verdict, summarize_draws

    fp32 = torch.randn(16, 10, generator=torch.Generator().manual_seed(1))
    near = fp32 + 0.01 * fp32.flip(1)  # cosine ~1, but rows whose two best logits were close swap
    accuracy = summarize_draws([draw_accuracy([fp32.flip(1)], [fp32], logits=True)])
    assert not int8_verdict(accuracy)["ok"]
    assert "top-1" not in (int8_verdict(accuracy, judge_top1=False)["error"] or "")
    close = summarize_draws([draw_accuracy([near], [fp32], logits=True)])
    assert int8_verdict(close, judge_top1=False)["ok"] and "top1_agreement" in close


@pytest.mark.unit
@pytest.mark.parametrize("vnni", [True, False])
def test_each_quantizer_guards_against_int8_saturation_only_on_a_cpu_without_vnni(vnni):
    """Both branches, the capability faked: without VNNI, ORT and torchao reduce the range
    and NNCF fixes overflow in every layer; with it, each quantizer's own default."""
    import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as xiq

    from adapters import openvino, ort, pt2e

    assert ort.quantize_settings(vnni)["reduce_range"] is (not vnni)
    assert pt2e.pt2e_settings(vnni)["reduce_range"] is (not vnni)
    assert openvino.nncf_settings(vnni)["overflow_fix"] == ("first_layer_only" if vnni else "enable")
    config = xiq.get_default_x86_inductor_quantization_config(reduce_range=pt2e.reduce_range(vnni))
    assert config.input_activation.quant_max == (255 if vnni else 127)  # the setting reaches the quantizer


@pytest.mark.unit
def test_calibration_seeds_stay_apart_from_the_evaluation_draws_and_their_hash_is_the_datas():
    import torch

    from adapters.artifacts import tensors_sha256
    from compare.worker.steps import EVAL_SEED_STRIDE, calibration_seeds

    seeds = calibration_seeds(0, 8, 8)
    assert len(set(seeds)) == 8 and not set(seeds) & {EVAL_SEED_STRIDE * i for i in range(8)}
    with pytest.raises(ValueError, match="repeat evaluation draws"):
        calibration_seeds(0, 6000, 200)
    a = [[torch.ones(2, 3)], [torch.zeros(2, 3)]]
    assert tensors_sha256(a) == tensors_sha256([[t.clone() for t in b] for b in a])
    assert tensors_sha256(a) != tensors_sha256(a[::-1])


@pytest.mark.unit
def test_the_cell_schema_carries_int8_fields_and_reads_a_v6_file():
    from compare.results.schema import SCHEMA_VERSION, Cell, LatencyStats, ResultsError, RunResults
    from compare.results.sections import flatten

    stats = LatencyStats.from_ms([1.0, 1.1, 0.9], number=1)
    cell = Cell.from_flat("mlp", "ort", "ok", dtype="int8", latency=stats, eager_latency=stats, fp32_eager_latency=stats,
                accuracy={"reference": "fp32 eager", "draws": 8, "max_abs": 0.1, "rel_err": 0.01, "cosine_min": 0.999})
    run = RunResults(environment={}, config={}, cells=[cell])
    back = RunResults.from_dict(run.to_dict())
    assert back.cells[0].int8.fp32_eager_latency == stats and back.cells[0].int8.accuracy == cell.int8.accuracy
    assert SCHEMA_VERSION >= 7  # 7 added these fields
    old = dict(run.to_dict(), schema_version=6)
    old["cells"] = [{k: v for k, v in flatten(c).items() if k not in ("fp32_eager_latency", "accuracy", "speedup_vs_fp32",
                                                             "speedup_vs_fp32_ci", "break_even_vs_fp32_calls")}
                    for c in old["cells"]]
    assert RunResults.from_dict(old).cells[0].int8.accuracy is None
    with pytest.raises(ResultsError, match="unknown field"):
        RunResults.from_dict(dict(run.to_dict(), cells=[dict(cell.to_dict(), int8_accuracy={})]))


@pytest.mark.unit
def test_backends_without_an_int8_quantizer_say_what_their_release_lacks():
    from pathlib import Path

    from adapters import backend_classes
    from adapters.base import CompileContext

    classes = backend_classes()
    for name, version in (("eager", "torchao"), ("inductor", "torchao"), ("aot-inductor", "torchao"), ("ort", None),
                          ("openvino", "nncf"), ("executorch", "executorch")):
        backend = classes[name]()
        assert backend.quantizes, name
        ctx = CompileContext("mlp", "k", "cpu", 1, Path("."), options=backend.options_type(), calibration=[[]])
        quantizer = backend.settings(ctx)["quantizer"]  # what the cell records: the quantizer and its version
        assert quantizer["quantizer"] and (version is None or quantizer[version]), name
        plain = CompileContext("mlp", "k", "cpu", 1, Path("."), options=backend.options_type())
        assert "quantizer" not in backend.settings(plain), name
    for name, word in (("tvm", "TVM"), ("tvm-untuned", "TVM"), ("iree", "IREE"), ("xla", "XLA"),
                       ("openvino-dynamo", "NNCF")):
        assert not classes[name].quantizes and word in classes[name].int8_unavailable, name


@pytest.mark.unit
def test_the_int8_table_shows_both_speedups_accuracy_and_quantize_time():
    from compare.report.text import summary_markdown
    from compare.results.derived import fill_derived
    from compare.results.schema import Cell, LatencyStats, RunResults

    def stats(ms):
        return LatencyStats.from_ms([ms * f for f in (0.98, 1.0, 1.02, 0.99, 1.01)], number=1)

    calibration = {"batches": 4, "sha256": "ab" * 32, "seeds": [1, 4]}
    accuracy = {"reference": "fp32 eager", "draws": 8, "max_abs": 0.02, "rel_err": 0.013, "cosine_min": 0.9991,
                "top1_agreement": 0.875, "top1_rows": 8}
    cells = [Cell.from_flat("resnet", backend, "ok", dtype="int8", latency=stats(ms), eager_latency=stats(4.0),
                  fp32_eager_latency=stats(6.0), compile_s=3.0, compile_phases={"quantize": 1.25, "compile": 1.75},
                  accuracy=accuracy, numerics_ok=True,
                  settings={"quantizer": {"quantizer": "nncf.quantize (post-training)"}, "calibration": calibration},
                  info={"int8_ops": {"int8": 21, "fp32": 3}})
             for backend, ms in (("openvino", 2.0), ("ort", 3.0))]
    cells.append(Cell.from_flat("resnet", "tvm", "unavailable", dtype="int8", error="tvm has no int8 path: TVM 0.27 ..."))
    run = RunResults(environment={}, config={}, cells=cells)
    fill_derived(run)
    assert run.cells[0].int8.speedup_vs_fp32 == pytest.approx(3.0) and run.cells[0].int8.break_even_vs_fp32_calls
    text = summary_markdown(run)
    assert "## int8" in text and "3.00x" in text and "2.00x" in text and "1.25" in text
    assert "0.9991" in text and "88% of 8" in text and "21/3" in text and "nncf.quantize" in text
    assert "the same data, by sha256" in text and "tvm has no int8 path" in text
    from compare.report.html import render_html

    html = render_html(run)
    assert "int8: each backend&#39;s own quantizer" in html or "int8: each backend's own quantizer" in html
    assert "0.9991" in html and "the same data, by sha256" in html
    other = dataclasses.replace(cells[1], conditions=dataclasses.replace(
        cells[1].conditions, settings={**cells[1].conditions.settings, "calibration": {**calibration, "sha256": "cd"}}))
    assert "DIFFERENT data" in summary_markdown(RunResults(environment={}, config={}, cells=[cells[0], other]))


# ----------------------------------------------------------------------------- runs


@pytest.mark.slow  # 107 s: the default suite's 15 minutes (the int8 units above stay in it)
def test_a_small_int8_run_through_ort_openvino_and_inductor_with_the_same_calibration_data(tmp_path):
    """mlp and conv at int8 through each backend's own quantizer; a backend whose release
    has none is unavailable with its reason; a broken (2-bit) test quantizer fails the int8
    tolerance (its honest 8-bit setting passing it is checked without a run, above)."""
    from adapters.base import has_vnni
    from compare.measure.accuracy import INT8_TOLERANCE, int8_verdict

    run_dir = tmp_path / "run"
    quantizing = ["inductor", "ort", "openvino"]
    proc = run_cli("--backends", ",".join(quantizing + ["tvm", "badquant:badquant-bits=2"]),
                   "--workloads", "mlp,conv", "--size", "small", "--dtype", "int8", "--calibration-batches", "2",
                   *FAST, "--output-dir", run_dir, env=_badquant_env(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the broken quantizer's cells disagree
    cells = {(c["workload"], c["backend"]): c for c in load_results(run_dir)["cells"]}
    for workload in ("mlp", "conv"):
        hashes = set()
        for backend in ["eager", *quantizing]:
            cell = cells[(workload, backend)]
            assert cell["status"] == "ok" and cell["dtype"] == "int8", (backend, cell["error"])
            assert cell["tolerance"] == INT8_TOLERANCE and cell["accuracy"]["draws"] == 8
            # the verdict is the int8 tolerance's on the accuracy (on this tiny random mlp,
            # Inductor's and NNCF's int8 land near its edge; conv passes with a wide margin)
            assert cell["numerics_ok"] is int8_verdict(cell["accuracy"])["ok"], (backend, cell["numerics_error"])
            if workload == "conv":
                assert cell["numerics_ok"] is True, (backend, cell["numerics_error"])
            assert cell["numerics_after_timing"]["ok"], backend  # the timing inputs bound again after the draws
            assert cell["fp32_eager_latency"]["median"] > 0 and cell["speedup_vs_fp32"] > 0
            assert "quantize" in cell["compile_phases"] and "quantizer" in cell["settings"]
            if backend in ("eager", "inductor"):  # this CPU's saturation guard, as recorded
                assert cell["settings"]["quantizer"]["reduce_range"] is not has_vnni()
            assert cell["settings"]["calibration"]["batches"] == 2
            hashes.add(cell["settings"]["calibration"]["sha256"])
            assert cell["info"]["int8_ops"]["int8"] >= 1, (backend, cell["info"]["int8_ops"])
        broken = cells[(workload, "badquant:badquant-bits=2")]
        assert broken["status"] == "ok" and broken["numerics_ok"] is False and "int8" in broken["numerics_error"]
        hashes.add(broken["settings"]["calibration"]["sha256"])
        assert len(hashes) == 1  # every backend calibrated on the same data
        tvm = cells[(workload, "tvm")]
        assert tvm["status"] == "unavailable" and "TVM 0.27" in tvm["error"]
    assert cells[("mlp", "ort")]["settings"]["quantizer"]["per_channel"] is True
    summary = (run_dir / "summary.md").read_text()
    assert "## int8" in summary and "the same data, by sha256" in summary


@needs_executorch
@pytest.mark.slow  # ExecuTorch's int8 lowering adds most of a minute: the slow tier keeps the default under 20
def test_a_small_int8_run_through_executorchs_xnnpack_quantizer(tmp_path):
    """XNNPACKQuantizer, then XNNPACK's int8 kernels, on the same calibration data as eager's."""
    run_dir = tmp_path / "run"
    proc = run_cli("--backends", "executorch", "--workloads", "mlp,conv", "--size", "small", "--dtype", "int8",
                   "--calibration-batches", "2", *FAST, "--output-dir", run_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cells = {(c["workload"], c["backend"]): c for c in load_results(run_dir)["cells"]}
    for workload in ("mlp", "conv"):
        cell, eager = cells[(workload, "executorch")], cells[(workload, "eager")]
        assert cell["status"] == "ok" and cell["numerics_ok"] is True, (workload, cell["error"], cell["numerics_error"])
        assert cell["settings"]["calibration"]["sha256"] == eager["settings"]["calibration"]["sha256"]
        assert list(cell["compile_phases"])[:3] == ["quantize", "export", "lower"]
        quantizer = cell["settings"]["quantizer"]
        assert "XNNPACKQuantizer" in quantizer["quantizer"] and quantizer["per_channel"] is True
        assert quantizer["calibration_batches"] == 2
        assert cell["info"]["int8_ops"]["quantized_outside_delegates"] == 0, cell["info"]["int8_ops"]
    # the mlp's GELUs run fp32 on dequantized tensors (XNNPACK has no int8 GELU)
    assert cells[("mlp", "executorch")]["info"]["int8_ops"] == {"int8": 3, "fp32": 2, "conversions": 15,
                                                                "quantized_outside_delegates": 0}


@pytest.mark.slow
def test_aot_inductor_packages_the_pt2e_quantized_model(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli("--backends", "aot-inductor", "--workloads", "conv", "--size", "small", "--dtype", "int8",
                   "--calibration-batches", "2", *FAST, "--output-dir", run_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cell = next(c for c in load_results(run_dir)["cells"] if c["backend"] == "aot-inductor")
    assert cell["status"] == "ok" and cell["numerics_ok"] is True and cell["info"]["int8_ops"]["int8"] >= 1
    assert list(cell["compile_phases"])[:2] == ["quantize", "export"]


@pytest.mark.unit
def test_a_quantizer_whose_package_is_missing_names_the_extra():
    from adapters.eager import EagerBackend

    class NoPackage(EagerBackend):
        quantizer_modules = ("dlcompare_no_such_quantizer",)

    assert "pip install -e '.[int8]'" in NoPackage().int8_missing()
    assert EagerBackend().int8_missing() is None


# ----------------------------------------------------------------------------- ExecuTorch


@pytest.mark.unit
@needs_executorch
def test_an_executorch_int8_program_is_stored_under_its_quantizer_and_calibration_data(tmp_path):
    import torch

    from adapters import artifacts
    from adapters.executorch import quantization_key

    batches = [[torch.ones(2, 3)], [torch.zeros(2, 3)]]
    key = quantization_key(batches)
    quantizer = key["quantizer"]
    assert quantizer["per_channel"] is True and quantizer["symmetric_weights"] is True
    assert quantizer["calibration_batches"] == 2 and quantizer["executorch"] and quantizer["torchao"]
    assert quantization_key(batches[::-1])["calibration_sha256"] != key["calibration_sha256"]
    base = {"target_key": "t", "workload_key": "w", "versions": {}}
    (tmp_path / "model.pte").write_bytes(b"pte")
    artifacts.write_meta(tmp_path, ["model.pte"], {**base, **key})
    assert artifacts.is_valid(tmp_path, {**base, **key})
    assert not artifacts.is_valid(tmp_path, {**base, **quantization_key(None)})  # never served to fp32
    assert not artifacts.is_valid(tmp_path, {**base, **quantization_key(batches[:1])})  # other calibration data
    artifacts.write_meta(tmp_path, ["model.pte"], base)  # an fp32 program stored before int8 existed
    assert artifacts.is_valid(tmp_path, {**base, **quantization_key(None)})
    assert not artifacts.is_valid(tmp_path, {**base, **key})


@pytest.mark.unit
def test_int8_ops_are_counted_by_op_name_not_by_substring():
    import torch
    import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers torch.ops.quantized_decomposed)

    from adapters.pt2e import node_kind, op_name

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    dq = graph.call_function(torch.ops.quantized_decomposed.dequantize_per_tensor.default, (x, 0.1, 0, -128, 127,
                                                                                            torch.int8))
    cat = graph.call_function(torch.ops.aten.cat.default, ([dq, dq],))  # "cat.default" holds "t.default"
    sqrt = graph.call_function(torch.ops.aten.sqrt.default, (cat,))
    view = graph.call_function(torch.ops.aten.view_copy.default, (sqrt, [-1]))
    kinds = {node.name: node_kind(node) for node in graph.nodes}
    assert kinds == {"x": None, "dequantize_per_tensor_default": "conversions", "cat_default": "int8",
                     "sqrt_default": "fp32", "view_copy_default": None}, kinds
    assert op_name(view.target) == "view" and op_name(torch.ops.aten.linear.default) == "linear"


@pytest.mark.parametrize("snippets", ["default", "DISABLE"])
def test_openvino_counts_int8_matmuls_fused_into_a_snippets_subgraph_or_not(tmp_path, snippets):
    """On AVX-512 the CPU plugin fuses a quantized MLP into one snippets Subgraph whose
    precision is its f32 output (seen on Zen 4); its three int8 MatMuls still count as int8.
    SNIPPETS_MODE DISABLE gives AVX2's path on any CPU: three FullyConnected layers in i8."""
    pytest.importorskip("nncf")
    import openvino as ov
    import torch

    from adapters.base import CompileContext
    from adapters.openvino import OpenVinoBackend, nncf_quantize, runtime_precisions
    from workloads.nets.survey import MLP

    torch.manual_seed(0)
    ctx = CompileContext("mlp", "mlp-int8-test", "cpu", 2, tmp_path, calibration=[[torch.randn(4, 32)] for _ in range(2)])
    model = OpenVinoBackend._convert(ov, MLP(32, 64).eval(), [torch.randn(4, 32)], ctx, "fp32", static=True)
    config = {"INFERENCE_NUM_THREADS": 2, **({"SNIPPETS_MODE": snippets} if snippets != "default" else {})}
    counts = runtime_precisions(ov.Core().compile_model(nncf_quantize(model, ctx), "CPU", config))
    assert counts["int8"] == 3, counts  # beside them, unfused, the input's FakeQuantize in f32
    assert counts["int8_fused"] in ((0, 3) if snippets == "default" else (0,)), counts


@pytest.mark.unit
def test_a_fused_subgraph_counts_its_dequantized_ops_as_int8_only_when_fed_int8():
    """The Subgraph branch of the count without a CPU that fuses (AVX2): faked runtime ops."""
    import openvino as ov

    from adapters.openvino import runtime_precisions

    class Text(str):
        def astype(self, _):
            return str(self)

    class Op:
        def __init__(self, layer, precision, inputs=(), names=""):
            self.info = {"layerType": Text(layer), "runtimePrecision": Text(precision),
                         "originalLayersNames": Text(names)}
            self.inputs = [type("Port", (), {"get_element_type": lambda self, t=t: t})() for t in inputs]

        def get_rt_info(self):
            return self.info

        def get_input_size(self):
            return len(self.inputs)

        def input(self, k):
            return self.inputs[k]

    names = "x/fq,fc1/MatMul,fc1/MatMul/DequantizationMultiply,gelu,fc2/MatMul,fc2/MatMul/DequantizationMultiply"
    ops = [Op("Input", "f32"), Op("Subgraph", "f32", [ov.Type.f32, ov.Type.i8], names),
           Op("Subgraph", "f32", [ov.Type.f32, ov.Type.f32], names), Op("Reorder", "f32"), Op("FullyConnected", "u8")]
    compiled = type("Compiled", (), {"get_runtime_model": lambda self: type(
        "Model", (), {"get_ordered_ops": lambda self: ops})()})()
    assert runtime_precisions(compiled) == {"int8": 3, "fp32": 1, "conversions": 1, "int8_fused": 2}
