"""The LLM decode suite (--suite llm): the KV cache itself, the decode figures, and a tiny
generation through eager, Inductor and ONNX Runtime."""
import math

import pytest

from compare.measure.latency import LatencyStats
from compare.results.schema import Cell, RunResults, cell_row
from conftest import FAST, load_results, run_cli


def _small():
    from workloads import build_model, builtin_workloads, make_inputs

    workload = builtin_workloads("all")["gpt2_decode"]
    params = workload.params("small")
    return build_model(workload, "small", 0), make_inputs(workload.input_specs("small"), 0)[0], params


@pytest.mark.unit
def test_cached_decode_gives_the_uncached_forward_logits_at_every_step():
    """Prefill plus decode steps over the padded cache give the logits of the full forward over
    the whole sequence, token after token: the cache is written where it is read."""
    import torch

    model, prompt, params = _small()
    prefill, step = model.prefill_module(), model.decode_module()
    sequence = prompt
    with torch.no_grad():
        logits, k_cache, v_cache = prefill(prompt)
        for index in range(params["new_tokens"]):
            full = model(sequence)[:, -1]
            assert torch.allclose(logits, full, atol=1e-4, rtol=1e-5), index
            token = logits.argmax(-1, keepdim=True)
            sequence = torch.cat([sequence, token], dim=1)
            position = torch.tensor([sequence.shape[1] - 1])
            logits, k_cache, v_cache = step(token, position, k_cache, v_cache)
    assert k_cache.shape == (params["layers"], 1, params["heads"], params["max_len"], params["dim"] // params["heads"])


@pytest.mark.unit
def test_a_decode_step_writes_one_slot_and_ignores_the_slots_after_it():
    import torch

    model, prompt, params = _small()
    with torch.no_grad():
        _, k_cache, v_cache = model.prefill_module()(prompt)
        position = torch.tensor([prompt.shape[1]])
        token = prompt[:, -1:]
        logits, k_new, _ = model.decode_module()(token, position, k_cache, v_cache)
        changed = (k_new != k_cache).any(dim=(0, 1, 2, 4)).nonzero().flatten().tolist()
        assert changed == [prompt.shape[1]]
        # garbage in the slots after the position (a stale cache) changes nothing
        dirty = k_cache.clone()
        dirty[:, :, :, prompt.shape[1] + 1:] = 1e3
        again, _, _ = model.decode_module()(token, position, dirty, v_cache)
    assert torch.equal(logits, again)


@pytest.mark.unit
def test_greedy_generation_matches_greedy_over_the_full_forward():
    import torch

    from compare.measure.generation import generate
    from compare.worker.decode import DecodeSetup, eager_pair

    model, prompt, params = _small()
    setup = DecodeSetup(dict(params), prompt, model, model)
    made = generate(eager_pair(setup, "cpu"), prompt, params["new_tokens"], keep_logits=True)
    sequence = prompt
    with torch.no_grad():
        for _ in range(params["new_tokens"]):
            sequence = torch.cat([sequence, model(sequence)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert [t[0] for t in made.tokens] == sequence[0, prompt.shape[1]:].tolist()
    assert len(made.step_s) == params["new_tokens"] - 1 and len(made.logits) == params["new_tokens"]
    assert made.ttft_s > 0 and all(s > 0 for s in made.step_s)


@pytest.mark.unit
def test_first_divergence_names_the_first_differing_token():
    from compare.worker.decode import first_divergence

    assert first_divergence([[1], [2], [3]], [[1], [2], [3]]) is None
    assert first_divergence([[1], [2], [4]], [[1], [2], [3]]) == 2
    assert first_divergence([[9], [2]], [[1], [2]]) == 0


def _decode_record(step_ms, ttft_ms, agree=True, diverged=None, recompiles=0):
    return {"prompt_len": 8, "new_tokens": 4, "max_len": 16, "batch": 1, "cache": "static-padded", "compiles": 2,
            "recompiles": recompiles, "token_ids_agree": agree, "first_divergent_step": diverged,
            "token_ids": [[1]] * 4, "eager_token_ids": [[1]] * 4,
            "samples": {"backend": {"ttft_ms": ttft_ms, "step_ms": step_ms},
                        "eager": {"ttft_ms": [2 * t for t in ttft_ms], "step_ms": [2 * s for s in step_ms]}}}


@pytest.mark.unit
def test_decode_figures_from_known_samples():
    from compare.scenarios.decode import fill_decode

    steps = [1.0] * 98 + [5.0, 9.0]  # 100 steps: p99 is the 99th smallest
    cell = Cell.from_flat(workload="gpt2_decode", backend="ort", status="ok",
                latency=LatencyStats.from_ms([20.0, 20.0], 1), eager_latency=LatencyStats.from_ms([40.0], 1),
                decode=_decode_record(steps, [3.0, 4.0, 5.0]))
    fill_decode(cell)
    decode = cell.scenario.decode
    assert decode["ttft_ms"] == 4.0 and decode["tpot_ms"] == {"p50": 1.0, "p99": 5.0, "n": 100}
    assert decode["tokens_per_s"] == pytest.approx(4 / 0.020)
    assert decode["eager"]["ttft_ms"] == 8.0 and decode["eager"]["tokens_per_s"] == pytest.approx(4 / 0.040)
    few = Cell.from_flat(workload="gpt2_decode", backend="ort", status="ok", latency=LatencyStats.from_ms([20.0], 1),
               eager_latency=LatencyStats.from_ms([40.0], 1), decode=_decode_record([1.0, 2.0, 3.0], [3.0]))
    fill_decode(few)
    assert few.scenario.decode["tpot_ms"]["p50"] == 2.0 and few.scenario.decode["tpot_ms"]["p99"] is None  # 3 steps: no p99


@pytest.mark.unit
def test_prefill_and_decode_tokens_per_second_from_known_step_times():
    """llama-bench's pp and tg: prompt 8 tokens, 4 new (3 decode steps) per generation."""
    from compare.scenarios.decode import fill_decode

    # Two generations each side: prefills of 4 and 8 ms; decode steps of 1 ms, then 2 ms.
    cell = Cell.from_flat(workload="gpt2_decode", backend="ort", status="ok", latency=LatencyStats.from_ms([7.0, 14.0], 1),
                eager_latency=LatencyStats.from_ms([14.0, 28.0], 1), process_samples=[2],
                decode=_decode_record([1.0] * 3 + [2.0] * 3, [4.0, 8.0]))
    fill_decode(cell)
    decode = cell.scenario.decode
    assert decode["pp_tokens_per_s"]["mean"] == pytest.approx((2000 + 1000) / 2)  # 8 tokens in 4 ms, in 8 ms
    assert decode["pp_tokens_per_s"]["sd"] == pytest.approx(707.107, rel=1e-5)
    assert decode["tg_tokens_per_s"]["mean"] == pytest.approx((1000 + 500) / 2) and decode["tg_tokens_per_s"]["n"] == 2
    assert decode["pp_tokens_per_s"]["median"] == pytest.approx(1500)  # of two: their mean
    assert decode["eager"]["tg_tokens_per_s"]["mean"] == pytest.approx(750 / 2)  # eager's steps take twice as long
    for name in ("pp", "tg"):  # every paired round is exactly 2x: the interval is the point
        assert decode[f"{name}_speedup"]["value"] == pytest.approx(2.0)
        assert decode[f"{name}_speedup"]["ci"] == pytest.approx([2.0, 2.0])
    row = cell_row(cell)
    assert row["decode_tg_tokens_per_s_mean"] == pytest.approx(750) and row["decode_pp_speedup_lo"] == pytest.approx(2)


@pytest.mark.unit
def test_a_prompt_the_model_cannot_hold_is_one_line_and_exit_2(capsys):
    from compare import cli

    assert cli.main(["--suite", "llm", "--prompt-len", "9000", "--backends", "ort"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "need 9008 positions; the model has 8192" in err[0]


@pytest.mark.unit
def test_processes_pool_their_decode_samples_and_verdicts():
    from compare.harness.pooling import pooled_decode

    pooled = pooled_decode([_decode_record([1.0], [3.0]), _decode_record([2.0, 4.0], [5.0], agree=False, diverged=3,
                                                                          recompiles=1)])
    assert pooled["samples"]["backend"] == {"ttft_ms": [3.0, 5.0], "step_ms": [1.0, 2.0, 4.0]}
    assert pooled["samples"]["eager"]["step_ms"] == [2.0, 4.0, 8.0]
    assert not pooled["token_ids_agree"] and pooled["first_divergent_step"] == 3
    assert pooled["recompiles"] == 1 and pooled["processes"] == 2
    assert pooled_decode([None]) is None


@pytest.mark.unit
def test_decode_cells_show_in_the_summary_and_the_csv_and_load_back():
    from compare.report.text import summary_markdown
    from compare.results.derived import fill_derived

    cell = Cell.from_flat(workload="gpt2_decode", backend="ort", status="ok", latency=LatencyStats.from_ms([20.0, 21.0], 1),
                eager_latency=LatencyStats.from_ms([40.0, 41.0], 1), numerics_ok=True,
                decode=_decode_record([1.0, 2.0, 3.0], [3.0]))
    plain = Cell.from_flat(workload="mlp", backend="ort", status="ok")  # an older cell without decode
    results = RunResults(environment={}, config={}, cells=[cell, plain])
    fill_derived(results)
    text = summary_markdown(results)
    assert "## LLM decode (prompt 8 tokens, 4 new tokens, max length 16, batch 1, KV cache static-padded)" in text
    assert "| gpt2_decode | ort" in text.split("## LLM decode")[1]
    row = cell_row(cell)
    assert row["decode_tpot_p50_ms"] == 2.0 and row["decode_eager_ttft_ms"] == 6.0 and row["decode_recompiles"] == 0
    assert "decode_ttft_ms" not in cell_row(plain)
    again = RunResults.from_dict(results.to_dict())
    assert again.cells[0].scenario.decode["ttft_ms"] == 3.0 and again.cells[1].scenario.decode is None


@pytest.mark.unit
def test_the_llm_suite_is_selected_by_suite():
    from workloads import resolve_workloads

    assert [w.name for w in resolve_workloads(None, suite="llm")] == ["llama_decode", "qwen2_decode", "gemma3_decode"]
    assert "gpt2_decode" in [w.name for w in resolve_workloads(None, suite="all")]


def _generate(tmp_path, workloads: str, backends: str) -> dict:
    """A small decode run; each cell's record, by (workload, backend), after the checks every
    decode cell must pass: ok, the greedy token ids eager's at every step, the figures filled
    and positive, nothing recompiled, both modules compiled."""
    out = tmp_path / "run"
    proc = run_cli("--workloads", workloads, "--size", "small", "--backends", backends, "--threads", "2", *FAST,
                   "--output-dir", out, "--no-history", "--quiet", timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = {(c["workload"], c["backend"]): c for c in load_results(out)["cells"]}
    assert sorted(cells) == sorted((w, b) for w in workloads.split(",") for b in ["eager", *backends.split(",")])
    for key, cell in cells.items():
        decode = cell["decode"]
        assert cell["status"] == "ok" and cell["numerics_ok"], (key, cell["error"], cell["numerics_error"])
        assert decode["token_ids_agree"] and decode["first_divergent_step"] is None, key
        assert decode["token_ids"] == decode["eager_token_ids"] and len(decode["token_ids"]) == decode["new_tokens"]
        assert decode["recompiles"] == 0 and decode["cache"] == "static-padded", key
        for side in (decode, decode["eager"]):
            assert side["ttft_ms"] > 0 and side["tpot_ms"]["p50"] > 0 and side["tokens_per_s"] > 0, key
            assert side["tpot_ms"]["p99"] is None or side["tpot_ms"]["p99"] >= side["tpot_ms"]["p50"]
            assert side["pp_tokens_per_s"]["mean"] > 0 and side["tg_tokens_per_s"]["mean"] > 0, key
        assert math.isclose(decode["tokens_per_s"], decode["new_tokens"] / (cell["latency"]["median"] / 1e3))
        if key[1] != "eager":
            phases = cell["compile_phases"]
            assert any(p.startswith("prefill_") for p in phases) and any(p.startswith("decode_") for p in phases)
            assert decode["pp_speedup"]["ci"][0] <= decode["pp_speedup"]["value"] <= decode["pp_speedup"]["ci"][1]
    summary = (out / "summary.md").read_text()
    assert "## LLM decode (prompt 8 tokens, 8 new tokens, max length 16" in summary and "tg vs eager" in summary
    assert "decode_tg_tokens_per_s_mean" in (out / "results.csv").read_text().splitlines()[0]
    return cells


@pytest.mark.slow  # 128 s: the default suite's 15 minutes (Inductor's two LLM paths stay in it, below)
def test_the_toy_and_transformers_llama_generate_eagers_tokens_through_inductor_and_ort(tmp_path):
    cells = _generate(tmp_path, "gpt2_decode,llama_decode", "inductor,ort")
    # Inductor's default LLM path: transformers' StaticCache for a transformers decoder; the toy's own modules.
    assert "StaticCache" in cells[("llama_decode", "inductor")]["info"]["prefill"]["llm_cache"]
    assert "llm_cache" not in cells[("gpt2_decode", "inductor")]["info"]["prefill"]


@pytest.mark.slow
def test_each_real_decoder_family_generates_eagers_tokens_through_inductor_ort_and_openvino(tmp_path):
    cells = _generate(tmp_path, "llama_decode,qwen2_decode,gemma3_decode", "inductor,ort,openvino")
    assert len(cells) == 12


@pytest.mark.unit
def test_a_module_that_fails_to_compile_names_itself_and_keeps_its_kind(tmp_path):
    from adapters import BackendUnavailable, CompileContext
    from compare.worker.decode import compile_part, part_context

    class Refusing:
        def __init__(self, exc):
            self.exc = exc

        def compile(self, module, examples, ctx):
            raise self.exc

    ctx = part_context(CompileContext("gpt2_decode", "key", "cpu", 1, tmp_path), "decode")
    assert ctx.workload_key == "key-decode" and ctx.work_dir == tmp_path / "decode"
    with pytest.raises(RuntimeError, match=r"^decode: ValueError: .*no lowering for aten.where"):
        compile_part(Refusing(ValueError("op dump\nno lowering for aten.where")), None, [], ctx, "decode")
    with pytest.raises(BackendUnavailable, match="^prefill: no KV cache here"):
        compile_part(Refusing(BackendUnavailable("no KV cache here")), None, [], ctx, "prefill")
    with pytest.raises(BackendUnavailable, match="^prefill: Refusing cannot lower this model in bf16: .*Expand"):
        compile_part(Refusing(RuntimeError("NOT_IMPLEMENTED: no kernel for Expand")), None, [], ctx, "prefill", "bf16")
    with pytest.raises(RuntimeError, match="^prefill: RuntimeError"):  # fp32: a failure, not a missing feature
        compile_part(Refusing(RuntimeError("NOT_IMPLEMENTED: no kernel for Expand")), None, [], ctx, "prefill")
    # the frontend's own messages stay behind the one-line failure, where the matrix reads the op
    wrapped = RuntimeError("ConversionError: (Refer to the full stack trace above for more information.)")
    wrapped.__cause__ = ValueError("No ONNX function found for <OpOverload(op='transformers.grouped_mm_fallback'")
    with pytest.raises(RuntimeError) as failed:
        compile_part(Refusing(wrapped), None, [], ctx, "prefill")
    from adapters.failures import unsupported_op
    from compare.worker.steps import failure_info

    assert unsupported_op(failure_info(failed.value)["error_text"]) == "transformers.grouped_mm_fallback"


@pytest.mark.unit
def test_next_token_accuracy_of_known_logits():
    import torch

    from compare.measure.accuracy import next_token_accuracy

    ref = [torch.tensor([[2.0, 0.0, 0.0]]), torch.tensor([[0.0, 1.0, 0.0]])]
    same = next_token_accuracy(ref, ref)
    assert same["top1_agreement"] == 1.0 and same["mean_kl"] == pytest.approx(0.0, abs=1e-12) and same["steps"] == 2
    flipped = [ref[0], torch.tensor([[1.0, 0.0, 0.0]])]  # the second step's top-1 moves
    got = next_token_accuracy(flipped, ref)
    p = torch.softmax(ref[1].double(), -1)
    kl = float((p * (p.log() - torch.log_softmax(flipped[1].double(), -1))).sum())
    assert got["top1_agreement"] == 0.5 and got["mean_kl"] == pytest.approx(kl / 2) and got["max_kl"] == pytest.approx(kl)
    assert "random weights" in got["note"]
    assert next_token_accuracy(flipped, ref, weights="/models/smollm2")["note"] == "trained weights from /models/smollm2"


@pytest.mark.unit
def test_a_forced_generation_feeds_the_given_tokens():
    import torch

    from adapters.eager import TorchCompiled
    from compare.measure.generation import DecodePair, generate

    model, prompt, params = _small()
    pair = DecodePair(TorchCompiled(model.prefill_module(), "cpu"), TorchCompiled(model.decode_module(), "cpu"))
    forced = [[7]] * params["new_tokens"]
    with torch.no_grad():
        made = generate(pair, prompt, params["new_tokens"], keep_logits=True, forced=forced)
        sequence = torch.cat([prompt, torch.full((1, params["new_tokens"] - 1), 7)], dim=1)
        full = model(sequence)  # the uncached forward over the forced sequence
    assert made.tokens == forced
    for index, logits in enumerate(made.logits):
        assert torch.allclose(logits, full[:, prompt.shape[1] - 1 + index], atol=1e-4, rtol=1e-5), index


@pytest.mark.unit
def test_weight_only_is_a_dtype_and_its_eager_cell_is_compared_with_fp32_eager():
    from compare import cli
    from compare.results.derived import fill_speedup

    config = cli.make_config(cli.parse(["--suite", "llm", "--dtype", "int8wo,int4wo", "--backends", "ort"]))
    assert config.dtypes == ["int8wo", "int4wo"]
    quantized = Cell.from_flat(workload="llama_decode", backend="eager", status="ok", dtype="int4wo",
                     latency=LatencyStats.from_ms([10.0, 11.0, 10.5, 10.2], 1),
                     eager_latency=LatencyStats.from_ms([20.0, 21.0, 20.5, 20.2], 1))
    assert quantized.role == "candidate" and not quantized.is_reference
    assert Cell.from_flat(workload="w", backend="eager", status="ok").is_reference
    fill_speedup(quantized)
    assert quantized.speedup == pytest.approx(20.35 / 10.35, rel=1e-3) and quantized.speedup_ci is not None


@pytest.mark.slow
def test_each_backends_weight_only_recipe_generates_and_is_read_against_fp32_eager(tmp_path):
    """int8 and int4 weight-only on the small Llama: every backend's own recipe runs, says
    what it ran, and is read on fp32 eager's sequence (top-1 agreement and KL)."""
    out = tmp_path / "run"
    backends = "inductor,ort,openvino,executorch"
    proc = run_cli("--workloads", "llama_decode", "--size", "small", "--dtype", "int8wo,int4wo", "--backends", backends,
                   "--threads", "2", *FAST, "--output-dir", out, "--no-history", "--quiet", timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = {(c["backend"], c["dtype"]): c for c in load_results(out)["cells"]}
    assert sorted(cells) == sorted((b, d) for b in ["eager", *backends.split(",")] for d in ("int8wo", "int4wo"))
    for key, cell in cells.items():
        assert cell["status"] == "ok" and cell["numerics_ok"], (key, cell["error"], cell["numerics_error"])
        accuracy = cell["decode"]["accuracy_vs_fp32"]
        assert accuracy["steps"] == cell["decode"]["new_tokens"] and 0.0 <= accuracy["top1_agreement"] <= 1.0
        assert accuracy["mean_kl"] >= 0.0, key
        assert cell["info"]["weight_only"]["quantizer"], key
        phases = cell["compile_phases"]
        assert phases.get("quantize_weights", 0) > 0 or {"prefill_quantize", "decode_quantize"} <= set(phases), key
        assert cell["speedup"] > 0 and cell["speedup_ci"] is not None, key
    assert cells[("eager", "int8wo")]["decode"]["accuracy_vs_fp32"]["top1_agreement"] >= 0.5  # int8 barely moves


def test_torch_int4_feeds_its_linears_bf16_and_leaves_a_tied_embedding_fp32():
    """torchao's CPU int4 linears take bf16 activations (the kernel's vectorized path) and hand
    fp32 back; a lm_head tied to the embedding is quantized without turning the embedding bf16."""
    import torch

    from adapters.weight_only import torchao_weight_only

    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(64, 64)
            self.proj = torch.nn.Linear(64, 64)
            self.head = torch.nn.Linear(64, 64, bias=False)
            self.head.weight = self.embed.weight

        def forward(self, ids):
            return self.head(self.proj(self.embed(ids)))

    torch.manual_seed(0)
    model, ids = Tied().eval(), torch.randint(0, 64, (1, 5))
    with torch.no_grad():
        expected = model(ids)
        torchao_weight_only(model, 4)
        got = model(ids)
    assert model.embed.weight.dtype == torch.float32 and got.dtype == torch.float32
    assert type(model.head.weight).__name__ == "Int4OpaqueTensor" and model.head.weight.dtype == torch.bfloat16
    assert torch.nn.functional.cosine_similarity(got.flatten(), expected.flatten(), dim=0) > 0.98


@pytest.mark.unit
def test_weight_only_without_a_decode_workload_is_one_line_and_exit_2(capsys):
    from compare import cli

    assert cli.main(["--suite", "paper", "--dtype", "int4wo", "--backends", "ort"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "measured on the decode suite" in err[0]


@pytest.mark.unit
def test_a_reduced_precision_decoder_is_judged_beside_eager_at_its_precision_on_fp32s_sequence():
    from compare.measure.accuracy import REDUCED_TOP1_MARGIN, reduced_precision_decode_verdict

    def acc(top1, finite=True):
        return {"top1_agreement": top1, "finite": finite}

    assert reduced_precision_decode_verdict(acc(0.90), acc(0.92), "bf16") is None  # within the margin
    assert reduced_precision_decode_verdict(acc(1.0), acc(0.80), "bf16") is None  # closer to fp32 than eager
    below = reduced_precision_decode_verdict(acc(0.92 - REDUCED_TOP1_MARGIN - 0.01), acc(0.92), "fp16")
    assert below is not None and "below fp16 eager's own 92%" in below
    assert reduced_precision_decode_verdict(acc(0.9, finite=False), acc(0.9), "bf16") == "non-finite logits"


@pytest.mark.slow
def test_a_bf16_decode_cell_is_read_on_fp32_eagers_sequence(tmp_path):
    out = tmp_path / "run"
    proc = run_cli("--workloads", "llama_decode", "--size", "small", "--dtype", "bf16", "--backends", "inductor",
                   "--output-dir", out)
    assert proc.returncode == 0, proc.stderr
    cells = {c["backend"]: c for c in load_results(out)["cells"]}
    for backend in ("eager", "inductor"):
        decode = cells[backend]["decode"]
        assert decode["accuracy_vs_fp32"]["steps"] == len(decode["fp32_token_ids"]) > 0, backend
        assert 0.0 <= decode["eager_accuracy_vs_fp32"]["top1_agreement"] <= 1.0
    # eager at bf16 is its own precision's reference: it reads fp32's sequence exactly as itself
    eager = cells["eager"]["decode"]
    assert eager["accuracy_vs_fp32"] == eager["eager_accuracy_vs_fp32"] and cells["eager"]["numerics_ok"]
    assert "vs fp32 eager: top-1" in (out / "summary.md").read_text()


@pytest.mark.parametrize("part", ["prefill", "decode"])
def test_a_failed_decode_cell_gets_a_standalone_reproducer_of_its_module(tmp_path, monkeypatch, part):
    """The script rebuilds the decoder without dlcompare and hands the failing module with its
    inputs to the backend's snippet (here a stand-in that calls it and prints the shapes)."""
    import subprocess
    import sys

    from compare.report import reproducers
    from compare.report.text import decode_failure_markdown

    class Snippet:
        reproducer = "with torch.no_grad():\n    print([tuple(t.shape) for t in model(*inputs)])\n"

    monkeypatch.setattr(reproducers, "backend_class", lambda name: Snippet)
    failed = Cell.from_flat(workload="llama_decode", backend="ort", status="failed", size="small",
                  error=f"{part}: RuntimeError: no kernel for something")
    toy = Cell.from_flat(workload="gpt2_decode", backend="ort", status="failed", size="small", error="prefill: x")
    results = RunResults(environment={"versions": {"torch": "2.13.0"}}, config={}, cells=[failed, toy], run_id="r")
    assert list(reproducers.decode_failures(results)) == [("llama_decode", "ort")]  # the toy has no transformers model
    assert "## LLM decode failures, with reproducers" in "\n".join(decode_failure_markdown(results))
    (path,) = reproducers.write_decode_reproducers(results, tmp_path)
    assert path == f"reproducers/llama_decode__ort__{part}.py"
    proc = subprocess.run([sys.executable, str(tmp_path / path)], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    shapes = proc.stdout.strip()
    assert shapes.startswith("[(1, ") and shapes.count("(") == 3  # logits, k_cache, v_cache


@pytest.mark.slow  # about a minute: two Inductor compiles of the model's own forward
@pytest.mark.parametrize("cache, says", [("static", "StaticCache"), ("explicit", "explicit")])
def test_inductor_through_either_llm_path_generates_eagers_tokens(tmp_path, cache, says):
    """--inductor-llm-cache static (the default): the model's own forward compiled with transformers'
    StaticCache, as transformers documents it; explicit: the suite's two modules. Both agree with
    eager token for token."""
    out = tmp_path / "run"
    proc = run_cli("--workloads", "llama_decode", "--size", "small", "--backends",
                   f"inductor:inductor-llm-cache={cache}", "--output-dir", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cell = next(c for c in load_results(out)["cells"] if c["backend"].startswith("inductor"))
    assert cell["status"] == "ok" and cell["numerics_ok"], (cell["error"], cell["numerics_error"])
    assert cell["decode"]["token_ids"] == cell["decode"]["eager_token_ids"]
    assert says in cell["info"]["prefill"]["llm_cache"]
