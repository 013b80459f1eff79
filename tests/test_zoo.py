"""Real models as users bring them (issue 44): every intake kind builds offline, a name that
needs a download is one line and exit 2, each coverage status is produced and classified,
the dynamo harness's CSV layout, and a small zoo through three compilers."""
import csv
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from compare.report import coverage
from compare.results.schema import Cell, RunResults
from conftest import FAST, FIXTURES, ROOT, load_results, run_cli
from workloads import WorkloadError

HAVE_ZOO = all(importlib.util.find_spec(m) for m in ("transformers", "timm", "torchvision"))
needs_zoo = pytest.mark.skipif(not HAVE_ZOO, reason="the [zoo] extra is not installed")
TINY_LLAMA = FIXTURES / "tiny_llama" / "config.json"
BUILD = """
import json, sys, torch
from workloads import build_model, make_inputs, resolve_workloads
(w,) = resolve_workloads(None, [sys.argv[1]], "none")
size = sys.argv[2]
model, inputs = build_model(w, size), make_inputs(w.input_specs(size))
with torch.no_grad():
    out = model(*inputs)
print(json.dumps({"name": w.name, "shape": list(out.shape), "finite": bool(torch.isfinite(out).all()),
                  "description": w.description, "inputs": [s.name for s in w.input_specs(size)]}))
"""


def _build(spec: str, size: str = "default") -> dict:
    """Build and call the spec's model in a fresh process with the network variables of an
    offline machine: nothing may be fetched."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", BUILD, spec, size], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


@needs_zoo
@pytest.mark.parametrize("spec,shape", [
    (f"hf:{TINY_LLAMA}", [1, 128, 1000]),  # a config.json: logits over the vocabulary
    ("timm:convnext_atto", [1, 1000]),
    ("torchvision:resnet18", [1, 1000]),
])
def test_each_intake_kind_builds_offline(spec, shape):
    built = _build(spec)
    assert built["shape"] == shape and built["finite"]


@needs_zoo
def test_a_text_model_is_called_with_its_attention_mask():
    built = _build(f"hf:{TINY_LLAMA}")
    assert built["inputs"] == ["input_ids", "attention_mask"]
    assert "LlamaForCausalLM(input_ids, attention_mask, use_cache=False).logits" in built["description"]


@needs_zoo
def test_every_zoo_entry_builds_at_the_small_size():
    code = ("import torch\nfrom workloads import builtin_workloads, build_model, make_inputs\n"
            "for name, w in builtin_workloads('zoo').items():\n"
            "    out = build_model(w, 'small')(*make_inputs(w.input_specs('small')))\n"
            "    assert torch.isfinite(out).all(), name\n"
            "    print(name)\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(proc.stdout.split()) >= 19


@needs_zoo
def test_a_local_folder_loads_its_own_weights(tmp_path):
    """hf:DIR with safetensors: the user's weights, not seeded random ones."""
    code = ("import sys, torch, transformers\n"
            "from workloads.zoo.build import import_torchvision\nimport_torchvision()\n"
            "config = transformers.AutoConfig.from_pretrained(sys.argv[1])\n"
            "torch.manual_seed(123)\nmodel = transformers.LlamaForCausalLM(config)\n"
            "model.save_pretrained(sys.argv[2])\n"
            "print(float(model.model.embed_tokens.weight[0, 0]))\n")
    saved = subprocess.run([sys.executable, "-c", code, str(TINY_LLAMA.parent), str(tmp_path / "mine")],
                           capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert saved.returncode == 0, saved.stderr[-2000:]
    check = BUILD.replace('print(json.dumps({', 'print(json.dumps({"w": float(model.model.model.embed_tokens.weight[0, 0]), ')
    proc = subprocess.run([sys.executable, "-c", check, f"hf:{tmp_path / 'mine'}", "default"], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    built = json.loads(proc.stdout.splitlines()[-1])
    assert built["w"] == pytest.approx(float(saved.stdout.split()[-1]))
    assert "its weights" in built["description"]


@pytest.mark.unit
def test_a_users_causal_lm_generates_with_suite_llm_and_runs_its_forward_otherwise(tmp_path):
    """hf:DIR of a Llama, Qwen2 or Gemma 3 causal LM is also a decode workload (NAME_decode),
    its folder's weights named when it has them; --suite llm runs that, otherwise the forward."""
    import shutil

    from workloads import resolve_workloads

    mine = tmp_path / "mine"
    mine.mkdir()
    shutil.copy(TINY_LLAMA, mine / "config.json")
    spec = f"hf:{mine}"

    def mine_decode():
        picked = resolve_workloads(None, [spec], "llm")  # beside the suite's own decoders
        assert "llama_decode" in [w.name for w in picked]
        (decode,) = [w for w in picked if w.source == spec]
        return decode

    decode = mine_decode()
    assert decode.name == "mine_decode" and decode.source == spec and list(decode.sizes) == ["small", "default"]
    assert decode.params("default")["weights"] is None and "its own weights" not in decode.description
    assert [w.name for w in resolve_workloads(None, [spec], "none")] == ["mine"]
    (mine / "model.safetensors").write_bytes(b"")  # named, not read, when the workload is planned
    decode = mine_decode()
    assert decode.params("default")["weights"] == str(mine) and "its own weights" in decode.description
    encoder = tmp_path / "enc"
    encoder.mkdir()
    (encoder / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"],
                                                           "vocab_size": 100}))
    with pytest.raises(WorkloadError, match="decode suite"):
        resolve_workloads(None, [f"hf:{encoder}"], "llm")
    assert "llama_decode" in [w.name for w in resolve_workloads(None, ["hf:llama"], "llm")]  # a zoo entry: the suite's own


@needs_zoo
@pytest.mark.slow
def test_a_users_trained_weights_are_read_by_weight_only_accuracy(tmp_path):
    """--suite llm --model hf:DIR: the folder's own weights generate, and a weight-only cell's
    accuracy against fp32 eager says they are trained, not random."""
    code = ("import sys, torch, transformers\n"
            "from workloads.zoo.build import import_torchvision\nimport_torchvision()\n"
            "config = transformers.AutoConfig.from_pretrained(sys.argv[1])\n"
            "torch.manual_seed(7)\ntransformers.LlamaForCausalLM(config).save_pretrained(sys.argv[2])\n")
    subprocess.run([sys.executable, "-c", code, str(TINY_LLAMA.parent), str(tmp_path / "mine")], check=True,
                   cwd=ROOT, timeout=300)
    proc = run_cli("--suite", "llm", "--workloads", "mine_decode", "--model", f"hf:{tmp_path / 'mine'}",
                   "--dtype", "int8wo", "--backends", "ort", "--prompt-len", "8", "--gen-len", "8", *FAST,
                   "--output-dir", tmp_path / "run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cells = {c["backend"]: c for c in load_results(tmp_path / "run")["cells"]}
    for backend in ("eager", "ort"):
        accuracy = cells[backend]["decode"]["accuracy_vs_fp32"]
        assert accuracy["note"] == f"trained weights from {tmp_path / 'mine'}", backend
        assert 0 <= accuracy["top1_agreement"] <= 1 and accuracy["mean_kl"] >= 0
    assert "(trained weights)" in (tmp_path / "run" / "summary.md").read_text()


def test_a_saved_export_program_runs_through_a_torch_backend(tmp_path):
    code = ("import sys, torch\n"
            "m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))\n"
            "torch.export.save(torch.export.export(m, (torch.randn(2, 8),)), sys.argv[1])\n")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "mlp.pt2")], check=True, cwd=ROOT, timeout=120)
    proc = run_cli("--model", f"pt2:{tmp_path / 'mlp.pt2'}", "--backends", "inductor", *FAST, "--processes", "1",
                   "--output-dir", tmp_path / "run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cells = {c["backend"]: c for c in load_results(tmp_path / "run")["cells"]}
    assert set(cells) == {"eager", "inductor"}  # --model alone: no survey graphs beside it
    assert cells["inductor"]["status"] == "ok" and cells["inductor"]["numerics_ok"]


def _onnx_file(path, batch="batch"):
    """A small ONNX graph written with onnx's own helpers: x[batch, 16] -> MatMul, Add, Relu,
    Softmax; the ids and mask inputs are there to be fed (an integer pair, as text models take)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Softmax", ["r"], ["y"], axis=-1),
             helper.make_node("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["maskf"], ["count"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16]),
                        helper.make_tensor_value_info("mask", TensorProto.INT64, [batch, "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8]),
         helper.make_tensor_value_info("count", TensorProto.FLOAT, [])], initializer=[weight, bias])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.unit
def test_an_onnx_file_takes_its_graph_inputs_with_symbolic_dims_made_concrete(tmp_path):
    from workloads import resolve_workloads

    (w,) = resolve_workloads(None, [f"onnx:{_onnx_file(tmp_path / 'tiny.onnx')}"], suite="none")
    specs = w.input_specs("default")
    assert [(s.name, s.shape, s.dtype, s.init) for s in specs] == [
        ("x", (1, 16), "float32", "randn"), ("mask", (1, 128), "int64", "ones")]
    assert [s.shape for s in w.with_batch(4).input_specs("default")] == [(4, 16), (4, 128)]
    assert "reference: onnxruntime with graph optimizations off" in w.description and "onnx" in w.tags
    (tmp_path / "bad.onnx").write_text("not a protobuf")
    with pytest.raises(WorkloadError, match="onnx.load failed"):
        resolve_workloads(None, [f"onnx:{tmp_path / 'bad.onnx'}"], suite="none")


@pytest.mark.slow  # 30-50 s: the slow tier (CI runs it too), to keep the default suite under 15 min in CI
def test_an_onnx_file_goes_through_each_onnx_frontend_and_torch_only_backends_say_why(tmp_path):
    proc = run_cli("--model", f"onnx:{_onnx_file(tmp_path / 'tiny.onnx')}", "--backends",
                   "inductor,ort,openvino,tvm-untuned,iree", *FAST, "--processes", "1", "--output-dir", tmp_path / "run")
    cells = {c["backend"]: c for c in load_results(tmp_path / "run")["cells"]}
    assert cells["inductor"]["status"] == "unavailable" and "torch programs only" in cells["inductor"]["error"]
    assert cells["eager"]["info"]["reference"] == "onnxruntime with graph optimizations off"
    for backend in ("ort", "openvino", "tvm-untuned", "iree"):
        cell = cells[backend]
        assert cell["status"] == "ok" and cell["numerics_ok"], (backend, cell.get("error"), proc.stderr[-2000:])
    assert cells["ort"]["info"]["frontend"] == "the ONNX file as given"
    summary = (tmp_path / "run" / "summary.md").read_text()
    assert "onnxruntime with graph optimizations off)" in summary  # the matrix's reference cell says what ran


@pytest.mark.unit
@pytest.mark.parametrize("argv,expected,preset", [
    (["--suite", "zoo"], (3, 3, True), {"min_samples": 1, "timeout": 600.0}),
    (["--suite", "zoo", "--processes", "2", "--interleave", "off", "--min-samples", "5", "--timeout", "60"],
     (2, 3, False), {}),
    (["--suite", "paper"], (3, 3, True), {}),
])
def test_the_zoo_runs_several_interleaved_processes_per_cell_as_the_survey_graphs_do(argv, expected, preset, tmp_path):
    """(--backends given: the zoo's default backends are the next test's.)"""
    from compare import cli
    from compare.report.text import preset_text

    config = cli.make_config(cli.parse([*argv, "--backends", "ort", "--output-dir", str(tmp_path)]))
    assert (config.processes, config.reference_processes, config.interleave) == expected
    assert config.timing["min_samples"] == preset.get("min_samples", 5 if "--min-samples" in argv else 10)
    assert config.timeout_s == preset.get("timeout", 60.0 if "--timeout" in argv else 1800.0)
    assert config.preset == preset
    said = preset_text(config.to_dict())
    assert ("--suite zoo set" in said) == bool(preset) and all(name.replace("_", " ") in said for name in preset)


def test_the_zoo_runs_every_cpu_compiler_unless_told(tmp_path):
    from compare import cli
    from compare.report.text import preset_text

    config = cli.make_config(cli.parse(["--suite", "zoo", "--output-dir", str(tmp_path)]))
    assert config.backends == ["eager", "inductor", "aot-inductor", "ort", "openvino", "tvm-untuned", "iree", "xla",
                               "executorch"]
    assert "backends inductor,aot-inductor,ort,openvino,tvm-untuned,iree,xla,executorch" in preset_text(config.to_dict())


@pytest.mark.unit
@pytest.mark.parametrize("spec,words", [
    ("hf:meta-llama/Llama-3.2-1B", "never downloads"),
    ("hf:no_such_entry", "never downloads"),
    ("timm:resnet50.a1_in1k", "pretrained tag would need a download"),
    ("pt2:/nonexistent/model.pt2", "no such file"),
    ("onnx:/nonexistent/model.onnx", "no such file"),
])
def test_a_model_that_needs_a_download_or_is_missing_is_one_line_and_exit_2(spec, words, tmp_path, capsys):
    if spec.startswith("timm:") and not HAVE_ZOO:
        pytest.skip("timm is not installed")
    from compare import cli

    code = cli.main(["--model", spec, "--backends", "inductor", "--output-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and words in err[0], err


@pytest.mark.unit
def test_a_failure_keeps_the_messages_of_the_exceptions_behind_it():
    from compare.worker.steps import failure_info

    try:
        try:
            raise LookupError("No ONNX function found for <OpOverload(op='x.y', overload='default')>")
        except LookupError as inner:
            raise RuntimeError("Failed to convert the exported program") from inner
    except RuntimeError as exc:
        info = failure_info(exc)
    assert info["first_error_line"] == "Failed to convert the exported program"
    assert info["error_text"].splitlines() == ["RuntimeError: Failed to convert the exported program",
                                               "LookupError: No ONNX function found for <OpOverload(op='x.y', "
                                               "overload='default')>"]


def _cell(backend, status="failed", error=None, info=None, numerics_ok=True, workload="m"):
    return Cell.from_flat(workload=workload, backend=backend, status=status, error=error, info=info or {},
                numerics_ok=numerics_ok if status == "ok" else None)


@pytest.mark.unit
@pytest.mark.parametrize("cell,eager,expected", [
    (_cell("ort", "ok"), _cell("eager", "ok"), ("pass", "")),
    (_cell("ort", "ok", numerics_ok=False), _cell("eager", "ok"), ("fail_accuracy", "max abs err None")),
    # the errors of issue 44's Llama, as each compiler printed them
    (_cell("openvino", error="OpConversionFailure: No conversion rule found for operations: aten::diff",
           info={"failed_phase": "convert"}), None, ("fail_convert", "aten::diff")),
    (_cell("iree", error="iree-compile error: failed to legalize operation 'torch.aten.diff' that was explicitly "
                         "marked illegal", info={"failed_phase": "compile"}), None, ("fail_convert", "torch.aten.diff")),
    (_cell("iree", error="iree-compile error: failed to legalize operation 'torch.vtensor.literal'",
           info={"failed_phase": "compile"}), None, ("fail_convert", "torch.vtensor.literal")),
    (_cell("tvm", error="InternalError: Check failed: (MatchesCode(kDLFloat)) is false: CreateAdd",
           info={"failed_phase": "build", "exception": "tvm.error.InternalError",
                 "first_error_line": "Check failed: (MatchesCode(kDLFloat)) is false: CreateAdd"}), None,
     ("fail_compile", "Check failed: (MatchesCode(kDLFloat)) is false: CreateAdd")),
    (_cell("xla", error="Unsupported: data-dependent", info={"failed_phase": "export",
                                                             "exception": "torch._dynamo.exc.Unsupported"}),
     None, ("fail_export", "Unsupported: data-dependent")),
    (_cell("ort", "timeout", error="no result within 900 s (was in phase 'compile')"), None,
     ("timeout", "no result within 900 s (was in phase 'compile')")),
    (_cell("ort", "out_of_memory", error="worker ran out of memory in phase 'compile': killed"), None,
     ("oom", "worker ran out of memory in phase 'compile': killed")),
    (_cell("ort", "ok"), _cell("eager", error="RuntimeError: shapes do not match"),
     ("eager_fail", "RuntimeError: shapes do not match")),
    (_cell("tvm", "unavailable", error="apache-tvm is not installed"), None, ("unavailable", "apache-tvm is not installed")),
    # torch.onnx's steps 1 and 2 (torch.export, its decompositions) are the export; ORT's swin and t5
    (_cell("ort", error="ConversionError: Failed to decompose the FX graph for ONNX compatibility. \x1b[96mThis is step "
                        "2/3\x1b[0m of exporting the model to ONNX.",
           info={"failed_phase": "compile", "exception": "torch.onnx._internal.exporter._errors.ConversionError"}),
     None, ("fail_export", "ConversionError: Failed to decompose the FX graph for ONNX compatibility. This is step 2/3 "
                           "of exporting the model to ONNX.")),
    (_cell("ort", error="TorchExportError: Failed to export the model with torch.export. This is step 1/3",
           info={"failed_phase": "compile", "exception": "torch.onnx._internal.exporter._errors.TorchExportError"}),
     None, ("fail_export", "TorchExportError: Failed to export the model with torch.export. This is step 1/3")),
    # issue 57's MoE decoders: the op is on a later line (OpenVINO) or in the exception that
    # torch.onnx's own wraps; the worker keeps the chain's messages in info.error_text
    (_cell("openvino", error="OpConversionFailure: Check 'false' failed at unconverted_ops_report.cpp:151: [...]",
           info={"failed_phase": "convert", "error_text": "OpConversionFailure: Check 'false' failed at "
                 "unconverted_ops_report.cpp:151:\n-- No conversion rule found for operations: aten::histc"}),
     None, ("fail_convert", "aten::histc")),
    (_cell("ort", error="ConversionError: Failed to convert the exported program to an ONNX model. [...]",
           info={"failed_phase": "compile", "error_text": "ConversionError: Failed to convert the exported program\n"
                 "DispatchError: No ONNX function found for <OpOverload(op='transformers.grouped_mm_fallback', "
                 "overload='default')>."}),
     None, ("fail_convert", "transformers.grouped_mm_fallback")),
    (_cell("iree", error='iree-compile error: failed to legalize operation \'torch.operator\' that was explicitly marked '
                        'illegal: %169 = "torch.operator"(%168) <{name = "torch.aten.histc"}> : (!torch.vtensor<[32],f32>)',
           info={"failed_phase": "compile"}), None, ("fail_convert", "torch.aten.histc")),
    (_cell("executorch", error="RuntimeError: SpecViolationError: Operator torch._ops.aten.histc.default is not in Core "
                               "ATen opset", info={"failed_phase": "compile"}), None, ("fail_convert", "aten.histc.default")),
    (_cell("xla", error="AssertionError: transformers.grouped_mm_fallback.default [...]", info={"failed_phase": "compile"}),
     None, ("fail_convert", "transformers.grouped_mm_fallback.default")),
])
def test_each_failure_is_classified(cell, eager, expected):
    assert coverage.classify(cell, eager) == expected


@pytest.mark.unit
def test_the_harness_csvs_have_its_columns_and_values(tmp_path):
    from compare.measure.stats import summarize

    def ok(backend, ms):
        return Cell.from_flat(workload="bert", backend=backend, status="ok", latency=summarize([ms / 1e3] * 10, 1),
                    eager_latency=summarize([2e-3] * 10, 1), numerics_ok=True, speedup=2.0 / ms, compile_s=3.0,
                    peak_rss_mb=1000.0)

    cells = [ok("eager", 2.0), ok("ort", 1.0), _cell("openvino", error="No conversion rule found for operations: aten::diff",
                                                    workload="bert"),
             _cell("tvm", "unavailable", error="not installed", workload="bert")]
    results = RunResults(environment={}, config={"suite": "zoo"}, cells=cells)
    written = {p.name for p in coverage.write_harness_csvs(results, tmp_path)}
    assert written == {f"{b}_zoo_fp32_inference_cpu_{k}.csv" for b in ("ort", "openvino") for k in ("accuracy", "performance")}
    rows = {p: list(csv.DictReader(open(tmp_path / "coverage" / p))) for p in written}
    assert list(rows["ort_zoo_fp32_inference_cpu_accuracy.csv"][0]) == ["dev", "name", "batch_size", "accuracy"]
    assert rows["ort_zoo_fp32_inference_cpu_accuracy.csv"][0]["accuracy"] == "pass"
    assert rows["openvino_zoo_fp32_inference_cpu_accuracy.csv"][0]["accuracy"] == "fail_to_run"
    perf = rows["ort_zoo_fp32_inference_cpu_performance.csv"][0]
    assert list(perf) == list(coverage.PERFORMANCE_COLUMNS)
    assert float(perf["speedup"]) == 2.0 and float(perf["abs_latency"]) == pytest.approx(1.0)
    assert float(perf["compilation_latency"]) == 3.0 and float(perf["dynamo_peak_mem"]) == pytest.approx(1000 * 2**20 / 1e9)
    failed = rows["openvino_zoo_fp32_inference_cpu_performance.csv"][0]
    assert (failed["batch_size"], float(failed["speedup"]), float(failed["abs_latency"])) == ("0", 0.0, 0.0)


@needs_zoo
def test_a_small_zoo_through_two_compilers_writes_the_matrix(tmp_path):
    # one entry (llama beside it cost 40 s of the default tier; the census slice covers decoders)
    proc = run_cli("--suite", "zoo", "--workloads", "resnet50", "--size", "small",
                   "--backends", "inductor,ort", *FAST, "--processes", "1", "--output-dir", tmp_path)
    cells = load_results(tmp_path)["cells"]
    assert len(cells) == 3, proc.stdout + proc.stderr
    summary = (tmp_path / "summary.md").read_text()
    assert summary.index("## Coverage") < summary.index("| workload")  # the matrix comes first
    assert "| resnet50 |" in summary
    for backend in ("inductor", "ort"):
        assert (tmp_path / "coverage" / f"{backend}_zoo_fp32_inference_cpu_accuracy.csv").exists()
    assert 'class="coverage"' in (tmp_path / "report.html").read_text()


def _raiser_path(site):
    """The raiser test backend, registered as a package would register it."""
    info = site / "dlcompare_raiser-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dlcompare-raiser\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[dlcompare.backends]\nraiser = dlcompare_raiser_backend:RaiserBackend\n")
    return os.pathsep.join([str(site), str(FIXTURES / "plugin")])


@needs_zoo
def test_a_backend_failing_in_each_phase_is_classified_in_the_matrix(tmp_path):
    """One run, the raiser backend three times (a variant per phase it fails in)."""
    env = {"PYTHONPATH": _raiser_path(tmp_path / "site")}
    variants = {"raiser:raiser-fail=export": ("fail_export", "data-dependent branching in forward"),
                "raiser:raiser-fail=convert": ("fail_convert", "aten::diff"),
                "raiser:raiser-fail=compile": ("fail_compile", "LLVM ERROR: Cannot select: a made-up instruction")}
    proc = run_cli("--model", f"hf:{TINY_LLAMA}", "--backends", ",".join(variants), *FAST, "--processes", "1",
                   "--output-dir", tmp_path / "run", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    results = RunResults.from_dict(load_results(tmp_path / "run"))
    records = {r["backend"]: r for r in coverage.matrix(results)}
    summary = (tmp_path / "run" / "summary.md").read_text()
    for backend, (status, detail) in variants.items():
        assert records[backend]["status"] == status and detail in records[backend]["detail"], records[backend]
        assert f"{status}: " in summary


@needs_zoo
@pytest.mark.slow  # the default suite's 15 minutes: hf_call's unit test below stays in it
def test_transformers_onnx_exporter_is_an_export_path_for_ort_and_other_models_say_why_not(tmp_path):
    proc = run_cli("--model", f"hf:{TINY_LLAMA}", "--workloads", "mlp,tiny_llama", "--backends",
                   "ort:ort-exporter=transformers", *FAST, "--output-dir", tmp_path / "run")
    cells = {c["workload"]: c for c in load_results(tmp_path / "run")["cells"] if c["backend"] != "eager"}
    llama = cells["tiny_llama"]
    assert llama["status"] == "ok" and llama["numerics_ok"], (llama.get("error"), proc.stderr[-2000:])
    assert llama["info"]["exporter"].startswith("transformers.exporters.OnnxExporter(OnnxConfig(opset_version=20, "
                                                "ort_fusions='cpu'))")
    assert llama["settings"]["exporter"].startswith("transformers.exporters.OnnxExporter")
    # a survey graph is no transformers model: torch's exporter, and the cell says why
    assert cells["mlp"]["status"] == "ok"
    assert "does not apply (" in cells["mlp"]["info"]["exporter"]


@pytest.mark.unit
def test_only_a_transformers_model_called_by_keyword_has_the_transformers_export_path():
    import torch

    from adapters.hf_exporters import hf_call

    assert "not a transformers model" in hf_call(torch.nn.Linear(2, 2), [torch.ones(2)])


@pytest.mark.unit
def test_each_failed_model_gets_its_own_reproducer():
    # swin and t5 failed ORT on the same line; each is its own model, and its own script
    records = [{"label": label, "backend": "ort", "status": "fail_export", "detail": "same line", "role": "candidate"}
               for label in ("swin", "t5")]
    assert coverage.reproducer_paths(records) == {("swin", "ort"): "reproducers/swin__ort.py",
                                                  ("t5", "ort"): "reproducers/t5__ort.py"}
