"""The model suite, batch sweeps and reduced precision."""
import math

import pytest
import torch

from conftest import FAST, FIXTURES, load_results, run_cli
from workloads import WorkloadError, build_model, builtin_workloads, make_inputs, resolve_workloads

MODELS = ["resnet", "mobilenet_v2", "bert", "gpt2", "vit"]
TINY = FIXTURES / "tiny_workloads.py"


@pytest.mark.unit
def test_model_suite_is_selected_by_suite():
    assert list(builtin_workloads("models")) == MODELS
    assert [w.name for w in resolve_workloads(None, suite="models")] == MODELS
    assert len(resolve_workloads(None, suite="all")) == 11  # paper 5, models 5, llm 1
    # named workloads come from any suite
    assert [w.name for w in resolve_workloads(["gpt2", "mlp"])] == ["gpt2", "mlp"]
    # ... and a name means one workload: the hand-written GPT-2, not the zoo's transformers one
    assert resolve_workloads(["gpt2"])[0] is builtin_workloads("models")["gpt2"]
    assert not set(builtin_workloads("all")) & set(builtin_workloads("zoo"))
    with pytest.raises(WorkloadError, match="unknown suite"):
        resolve_workloads(None, suite="nope")


@pytest.mark.unit
@pytest.mark.parametrize("name", MODELS)
def test_small_model_is_deterministic_finite_and_batchable(name):
    w = builtin_workloads()[name]
    specs = w.input_specs("small")
    with torch.no_grad():
        a = build_model(w, "small")(*make_inputs(specs))
        b = build_model(w, "small")(*make_inputs(specs))
    assert torch.equal(a, b) and torch.isfinite(a).all()
    # --batch rewrites the batch parameter: inputs, outputs and the cache key follow it
    w3 = w.with_batch(3)
    assert w3.input_specs("small")[0].shape[0] == 3 and w3.batch_of("small") == 3
    assert w3.key("small") != w.key("small") and w.with_batch(None) is w
    with torch.no_grad():
        out = build_model(w3, "small")(*make_inputs(w3.input_specs("small")))
    assert out.shape[0] == 3


@pytest.mark.unit
def test_default_sizes_are_the_published_shapes():
    params = {n: builtin_workloads()[n].params("default") for n in MODELS}
    assert params["resnet"]["depth"] == 18 and params["resnet"]["hw"] == 224
    assert params["mobilenet_v2"]["width_mult"] == 1.0 and params["mobilenet_v2"]["hw"] == 224
    assert (params["vit"]["dim"], params["vit"]["layers"], params["vit"]["patch"]) == (192, 12, 16)
    resnet = build_model(builtin_workloads()["resnet"], "default")
    assert 11e6 < sum(p.numel() for p in resnet.parameters()) < 12e6  # ResNet-18: 11.7 M


@pytest.mark.unit
def test_with_batch_refuses_workloads_without_a_batch_dimension(tmp_path):
    w = builtin_workloads()["mlp"]
    import dataclasses

    unbatched = dataclasses.replace(w, batch_param=None)
    with pytest.raises(WorkloadError, match="no batch dimension"):
        unbatched.with_batch(2)
    with pytest.raises(WorkloadError, match="positive"):
        w.with_batch(0)


@pytest.mark.unit
def test_reduced_precision_verdict_scales_with_eager_error():
    from compare.measure.numerics import reduced_precision_verdict

    eager = {"max_abs": 0.01}
    assert reduced_precision_verdict({"max_abs": 0.03}, eager, "bf16", 1.0)["ok"]
    bad = reduced_precision_verdict({"max_abs": 0.2}, eager, "bf16", 1.0)
    assert not bad["ok"] and "exceeds" in bad["error"]
    assert not reduced_precision_verdict({"max_abs": math.inf, "error": "non-finite"}, eager, "fp16", 1.0)["ok"]
    # a perfect eager still leaves one unit of roundoff at the output's scale
    assert reduced_precision_verdict({"max_abs": 1e-3}, {"max_abs": 0.0}, "fp16", 2.0)["ok"]


@pytest.mark.parametrize("argv, message", [
    (["--batch", "0"], "must be positive"),
    (["--batch", "2,2"], "twice"),
    (["--dtype", "fp8"], "unknown dtype"),
    (["--suite", "nope"], "invalid choice"),
])
def test_bad_sweep_options_are_one_line_usage_errors(argv, message, tmp_path):
    proc = run_cli(*argv, "--output-dir", tmp_path, "--no-history")
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # 55 s of real compiles; its bad options are tested above, its cells in CI
def test_batch_and_dtype_sweep_make_one_cell_each(tmp_path):
    out = tmp_path / "run"
    proc = run_cli("--workload-file", TINY, "--workloads", "tiny_linear", "--size", "small",
                   "--backends", "ort", "--batch", "1,5", "--dtype", "fp32,bf16", "--threads", "1",
                   *FAST, "--output-dir", out, "--no-history", "--quiet")
    data = load_results(out)
    cells = {(c["workload"], c["backend"], c["batch"], c["dtype"]): c for c in data["cells"]}
    assert len(cells) == 2 * 2 * 2, proc.stderr  # backends x batches x dtypes
    for batch in (1, 5):
        for dtype in ("fp32", "bf16"):
            eager = cells[("tiny_linear", "eager", batch, dtype)]
            assert eager["status"] == "ok", eager
            assert eager["latency"]["median"] > 0
    # the batch reached the model: bf16 eager ran, and a bigger batch is a different cache key
    keys = {c["workload_key"] for c in data["cells"] if c["workload"] == "tiny_linear" and c["backend"] == "eager"}
    assert len(keys) == 4
    assert cells[("tiny_linear", "eager", 5, "bf16")]["tolerance"]["factor_of_eager_error"] > 0
    # ORT's CPU provider has no bf16 kernels for these ops: unavailable with the reason, not faked
    ort_bf16 = cells[("tiny_linear", "ort", 1, "bf16")]
    assert ort_bf16["status"] in ("unavailable", "failed") and ort_bf16["error"]
    assert cells[("tiny_linear", "ort", 5, "fp32")]["status"] == "ok"
    summary = (out / "summary.md").read_text()
    assert "tiny_linear[b5,bf16]" in summary and "tiny_linear[b1]" in summary
    csv = (out / "results.csv").read_text().splitlines()[0].split(",")
    assert "batch" in csv and "dtype" in csv
    html = (out / "report.html").read_text()
    assert "Batch scaling" in html and "Geometric-mean speedup per backend" in html


@pytest.mark.unit
def test_geomean_per_backend_counts_slowdowns_and_lists_what_it_leaves_out():
    from compare.report.text import geomean_rows, summary_markdown
    from compare.results.schema import Cell, RunResults

    def cell(workload, backend, speedup, status="ok", numerics_ok=True, batch=None):
        return Cell.from_flat(workload=workload, backend=backend, status=status, speedup=speedup,
                    numerics_ok=numerics_ok, batch=batch)

    results = RunResults(environment={}, config={}, cells=[
        cell("a", "eager", 1.0), cell("a", "x", 4.0), cell("b", "x", 0.25), cell("c", "x", 9.0, numerics_ok=False),
        cell("d", "x", None, status="failed"), cell("a", "x", 2.0, batch=8),
    ])
    rows = {(r["backend"], r["batch"]): r for r in geomean_rows(results)}
    assert rows[("x", "own")]["geomean speedup"] == "1.00x"  # sqrt(4 * 0.25): the slowdown counts
    assert rows[("x", "own")]["slower than eager"] == "1 of 2"
    assert rows[("x", "own")]["left out"] == "c (numerics), d (failed)"
    assert rows[("x", 8)]["geomean speedup"] == "2.00x"
    assert "Geometric-mean speedup per backend" in summary_markdown(results)


def _check_every_cell_is_measured_or_explained(data, proc):
    for c in data["cells"]:
        where = f"{c['workload']}[{c['dtype']}] / {c['backend']}"
        assert c["status"] in ("ok", "unavailable", "failed"), (where, c["status"], c.get("error"))
        if c["status"] == "ok":
            assert c["latency"]["median"] > 0 and c["compile_s"] is not None, where
            if c["numerics_ok"] is False:
                assert c["numerics_error"], where
        else:
            assert c["error"] and len(c["error"].splitlines()) == 1, where
        if c["backend"] == "eager":
            assert c["status"] == "ok" and c["numerics_ok"], where
    # exit 1 exactly when some cell failed or disagreed with the reference
    bad = [c for c in data["cells"] if c["status"] == "failed" or c.get("numerics_ok") is False]
    assert proc.returncode == (1 if bad else 0), proc.stderr[-2000:]


@pytest.mark.slow  # two models through four compilers; the sweep test keeps the suite in the default tier
def test_models_lower_through_every_compiler_or_say_why(tmp_path):
    """A CNN and a causal decoder at the small size through each real compiler (TVM
    untuned: tuning 20+ tasks does not fit a test run)."""
    out = tmp_path / "run"
    proc = run_cli("--suite", "models", "--workloads", "resnet,gpt2", "--size", "small",
                   "--backends", "inductor,ort,tvm-untuned,iree", "--threads", "2", "--time-budget", "0.3",
                   "--min-samples", "3", "--reference-processes", "1", "--output-dir", out, "--no-history", "--quiet", timeout=1200)
    data = load_results(out)
    assert len(data["cells"]) == 2 * 5
    _check_every_cell_is_measured_or_explained(data, proc)
    # ONNX Runtime and IREE lower both architectures correctly
    for w in ("resnet", "gpt2"):
        for b in ("ort", "iree", "inductor"):
            cell = next(c for c in data["cells"] if c["workload"] == w and c["backend"] == b)
            assert cell["status"] == "ok" and cell["numerics_ok"], (w, b, cell.get("error"), cell.get("numerics_error"))


@pytest.mark.slow
def test_whole_model_suite_in_fp32_and_fp16(tmp_path):
    out = tmp_path / "run"
    proc = run_cli("--suite", "models", "--size", "small", "--dtype", "fp32,fp16",
                   "--backends", "inductor,ort,tvm-untuned,iree", "--threads", "2", "--time-budget", "0.3",
                   "--min-samples", "3", "--reference-processes", "1", "--output-dir", out, "--no-history", "--quiet", timeout=2400)
    data = load_results(out)
    assert len(data["cells"]) == 5 * 2 * 5
    _check_every_cell_is_measured_or_explained(data, proc)


@pytest.mark.unit
def test_a_type_rejection_keeps_the_reason_at_the_end_of_a_long_message():
    from compare.worker.steps import one_line

    dump = "ir.Op(" + "x" * 2000 + ") requires all the input tensors to have the same dtype. However, the gamma has dtype T.float16"
    line = one_line(TypeError(dump), 300, keep_end=True)
    assert line.startswith("TypeError: ...") and line.endswith("gamma has dtype T.float16") and len(line) <= 300
    assert one_line(RuntimeError("trace\nmore\nthe reason"), keep_end=True) == "RuntimeError: the reason"
    assert one_line(RuntimeError("first\nsecond")) == "RuntimeError: first [...]"
