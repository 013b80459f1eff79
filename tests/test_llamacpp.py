"""llama.cpp beside the compilers (the [llamacpp] extra): the GGUF writer's file as llama.cpp
reads it, and small decoders generating eager's tokens through llama.cpp at f32 and f16."""
import importlib.util

import pytest

from conftest import FAST, load_results, run_cli

needs_gguf = pytest.mark.skipif(importlib.util.find_spec("gguf") is None, reason="gguf not installed: the [llamacpp] extra")
needs_llamacpp = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                                    reason="llama-cpp-python not installed: pip install -e '.[llamacpp]'")


def _small_lm(zoo_name: str):
    """The causal LM inside the decode workload that ``--model hf:ZOO_NAME`` makes, at small size."""
    from workloads import build_model
    from workloads.zoo.intake import spec_workloads

    (decode,) = [w for w in spec_workloads(f"hf:{zoo_name}") if w.name.endswith("_decode")]
    return build_model(decode, "small", 0).lm


@pytest.mark.unit
@pytest.mark.parametrize("option, dtype, on", [("auto", "fp32", False), ("auto", "fp16", True), ("auto", "int4wo", True),
                                               ("on", "fp32", True), ("off", "bf16", False)])
def test_flash_attention_is_off_at_fp32_unless_asked(option, dtype, on):
    """ggml's CPU flash attention does not keep fp32 (measured: tokens part at pp512), so auto
    leaves it off for fp32 cells and on, as llama-bench does, for the others."""
    from adapters.llamacpp import flash_attention

    assert flash_attention(option, dtype) is on


@pytest.mark.unit
def test_the_rotary_permutation_interleaves_each_heads_halves():
    """HF's rotate-half rows [x0..x3 | y0..y3] of a head become llama.cpp's pairs (x0, y0, x1, y1, ...)."""
    import numpy as np

    from adapters.llamacpp import permute_rotary

    rows = np.arange(16).reshape(16, 1)  # 2 heads of 8 rows
    assert permute_rotary(rows, 2)[:, 0].tolist() == [0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15]


@pytest.mark.unit
def test_llamacpp_takes_decode_workloads_only():
    from adapters import get_backend
    from workloads.llm import LLM_TAG

    backend = get_backend("llamacpp")
    assert "decode suite" in backend.unavailable_for(("paper",))
    assert backend.unavailable_for(("llm", LLM_TAG)) is None
    assert backend.weight_only_recipe(4)["quantizer"].startswith("llama_model_quantize")


@needs_gguf
@pytest.mark.unit
@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3"])
def test_the_gguf_file_names_every_tensor_as_llama_cpp_reads_it(tmp_path, family):
    import gguf

    from adapters.llamacpp import write_gguf

    lm = _small_lm(family)
    written = write_gguf(lm, tmp_path / "m.gguf", "F32")
    reader = gguf.GGUFReader(tmp_path / "m.gguf")
    names = {t.name: t for t in reader.tensors}
    config = lm.config
    assert written["tensors"] == len(names) and "token_embd.weight" in names and "output_norm.weight" in names
    assert ("output.weight" in names) != bool(config.tie_word_embeddings)
    for layer in range(config.num_hidden_layers):
        assert {f"blk.{layer}.{p}.weight" for p in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
                                                   "ffn_down", "attn_norm", "ffn_norm")} <= set(names)
    assert ("blk.0.attn_q.bias" in names) == (family == "qwen2")  # Qwen2's q/k/v biases
    if family == "gemma3":  # QK-norm, the sandwich norms, (1 + weight) written as llama.cpp's weight
        assert {f"blk.0.{p}.weight" for p in ("attn_q_norm", "attn_k_norm", "post_attention_norm",
                                              "post_ffw_norm")} <= set(names)
        norm = lm.model.layers[0].input_layernorm.weight.detach().numpy()
        assert abs(float(names["blk.0.attn_norm.weight"].data[0]) - (float(norm[0]) + 1.0)) < 1e-6
        assert int(reader.fields["gemma3.attention.sliding_window"].parts[-1][0]) == config.sliding_window
        assert float(reader.fields["gemma3.rope.freq_base"].parts[-1][0]) == 1e6  # the global layers
    fields = reader.fields
    assert bytes(fields["tokenizer.ggml.model"].parts[-1]).decode() == "none"
    assert int(fields[f"{written['arch']}.vocab_size"].parts[-1][0]) == config.vocab_size
    assert list(names["token_embd.weight"].shape) == [config.hidden_size, config.vocab_size]  # GGUF dims reversed


@needs_gguf
@pytest.mark.unit
@pytest.mark.parametrize("family, arch", [("olmoe", "olmoe"), ("granite_moe", "granitemoe")])
def test_the_moe_decoders_experts_are_stacked_as_llama_cpp_reads_them(tmp_path, family, arch):
    """transformers 5 fuses each layer's experts (gate_up_proj [experts, 2 x ffn, hidden]);
    llama.cpp reads ffn_gate_exps, ffn_up_exps and ffn_down_exps, gate the first half."""
    import gguf
    import numpy as np

    from adapters.llamacpp import write_gguf

    lm = _small_lm(family)
    config = lm.config
    written = write_gguf(lm, tmp_path / "m.gguf", "F32")
    reader = gguf.GGUFReader(tmp_path / "m.gguf")
    names = {t.name: t for t in reader.tensors}
    experts, used = written["experts"]
    assert written["arch"] == arch and (experts, used) == (8, 2)
    hidden, ffn = config.hidden_size, config.intermediate_size
    for part in ("ffn_gate_exps", "ffn_up_exps"):
        assert list(names[f"blk.1.{part}.weight"].shape) == [hidden, ffn, experts]  # GGUF dims reversed
    assert list(names["blk.1.ffn_down_exps.weight"].shape) == [ffn, hidden, experts]
    assert list(names["blk.1.ffn_gate_inp.weight"].shape) == [hidden, experts]
    fused = lm.model.layers[1].state_dict()
    gate_up = next(v for k, v in fused.items() if k.endswith("experts.gate_up_proj")).numpy()
    gate = np.asarray(names["blk.1.ffn_gate_exps.weight"].data).reshape(experts, ffn, hidden)
    assert np.array_equal(gate, gate_up[:, :ffn])
    assert int(reader.fields[f"{arch}.expert_count"].parts[-1][0]) == experts
    assert int(reader.fields[f"{arch}.expert_used_count"].parts[-1][0]) == used
    if family == "granite_moe":  # muP multipliers under llama.cpp's names
        assert float(reader.fields["granitemoe.residual_scale"].parts[-1][0]) == pytest.approx(0.22)
        assert float(reader.fields["granitemoe.logit_scale"].parts[-1][0]) == pytest.approx(6.0)


@needs_llamacpp
@pytest.mark.slow
def test_the_moe_decoders_generate_eagers_tokens_through_llamacpp(tmp_path):
    """OLMoE and Granite-MoE named with --model, generated by llama.cpp in the workers."""
    out = tmp_path / "run"
    proc = run_cli("--suite", "llm", "--model", "hf:olmoe", "--model", "hf:granite_moe", "--workloads",
                   "olmoe_decode,granite_moe_decode", "--size", "small", "--backends", "llamacpp", "--threads", "2",
                   *FAST, "--output-dir", out, "--no-history", "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = [c for c in load_results(out)["cells"] if c["backend"] == "llamacpp"]
    assert len(cells) == 2
    for cell in cells:
        assert cell["status"] == "ok" and cell["numerics_ok"], (cell["workload"], cell["error"], cell["numerics_error"])
        assert cell["decode"]["token_ids"] == cell["decode"]["eager_token_ids"]
        assert cell["info"]["prefill"]["gguf"]["experts"] == [8, 2]


@needs_llamacpp
# fp16 and bf16 in the slow tier: each is 25 s of the default suite's 15 minutes.
@pytest.mark.parametrize("dtype", ["fp32", pytest.param("fp16", marks=pytest.mark.slow),
                                   pytest.param("bf16", marks=pytest.mark.slow)])
def test_llama_qwen2_and_gemma3_generate_eagers_tokens_through_llamacpp(tmp_path, dtype):
    out = tmp_path / "run"
    proc = run_cli("--workloads", "llama_decode,qwen2_decode,gemma3_decode", "--size", "small", "--dtype", dtype,
                   "--backends", "llamacpp", "--threads", "2", *FAST, "--output-dir", out, "--no-history", "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = [c for c in load_results(out)["cells"] if c["backend"] == "llamacpp"]
    assert len(cells) == 3
    for cell in cells:
        decode = cell["decode"]
        assert cell["status"] == "ok" and cell["numerics_ok"], (cell["workload"], cell["error"], cell["numerics_error"])
        assert decode["token_ids"] == decode["eager_token_ids"]
        own = decode["own_timings"]
        assert own["source"] == "llama_perf_context" and own["pp_tokens_per_s"] > 0 and own["tg_tokens_per_s"] > 0
        assert own["generated_tokens"] >= decode["new_tokens"] - 1
        assert cell["info"]["prefill"]["gguf"]["file_type"] == {"fp32": "F32", "fp16": "F16", "bf16": "BF16"}[dtype]
        assert {"prefill_write_gguf", "prefill_load"} <= set(cell["compile_phases"])


@needs_llamacpp
@pytest.mark.slow
def test_llamacpps_q8_0_and_q4_0_are_read_against_fp32_eager(tmp_path):
    out = tmp_path / "run"
    proc = run_cli("--workloads", "llama_decode", "--size", "small", "--dtype", "int8wo,int4wo", "--backends", "llamacpp",
                   "--threads", "2", *FAST, "--output-dir", out, "--no-history", "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = {c["dtype"]: c for c in load_results(out)["cells"] if c["backend"] == "llamacpp"}
    for dtype, kind in (("int8wo", "Q8_0"), ("int4wo", "Q4_0")):
        cell = cells[dtype]
        assert cell["status"] == "ok" and cell["info"]["prefill"]["gguf"]["file_type"] == kind, cell["error"]
        assert "prefill_quantize" in cell["compile_phases"]
        assert 0.0 <= cell["decode"]["accuracy_vs_fp32"]["top1_agreement"] <= 1.0
