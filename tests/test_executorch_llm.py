"""ExecuTorch's own LLM path for the decode suite (adapters/executorch_llm.py): the
transformers decoder mapped onto llama_transformer, and the cells that take it."""
import importlib.util

import pytest

needs_executorch = pytest.mark.skipif(importlib.util.find_spec("executorch") is None, reason="executorch not installed")


def _decoder(model_type: str):
    from workloads.zoo import import_torchvision

    import_torchvision()  # before transformers imports it (workloads/zoo: the registry's CUDA build)
    import transformers

    from workloads.nets.hf_decoder import HFDecoder

    config_class = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config,
                    "gemma3_text": transformers.Gemma3TextConfig}[model_type]
    config = config_class(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                          num_hidden_layers=2, vocab_size=100, tie_word_embeddings=True, head_dim=8)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    return HFDecoder(model, max_len=16)


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_every_transformers_weight_has_its_llama_transformer_name(model_type):
    from adapters.executorch_llm import llama_params, llama_weights

    decoder = _decoder(model_type)
    weights = llama_weights(decoder.lm.state_dict())
    assert weights["output.weight"] is weights["tok_embeddings.weight"] or (
        weights["output.weight"].equal(weights["tok_embeddings.weight"]))  # tied: the embedding
    assert ("layers.1.attention.wq.bias" in weights) == (model_type == "qwen2")
    assert {"layers.0.feed_forward.w1.weight", "layers.1.ffn_norm.weight", "norm.weight"} <= set(weights)
    params = llama_params(decoder.lm.config)
    assert (params["n_heads"], params["n_kv_heads"], params["head_dim"], params["use_hf_rope"]) == (4, 2, 8, True)
    assert params["attention_qkv_bias"] == (model_type == "qwen2")


def test_only_fp32_llama_and_qwen2_steps_take_the_path_and_the_rest_say_why(tmp_path):
    import torch

    from adapters.base import CompileContext
    from adapters.executorch import ExecutorchOptions
    from adapters.executorch_llm import applies

    def context(path="export-llm"):
        return CompileContext("d", "d", "cpu", 1, tmp_path, options=ExecutorchOptions(executorch_llm_path=path))

    prompt = torch.zeros(1, 4, dtype=torch.int64)
    llama = _decoder("llama")
    assert applies(llama.prefill_module(), [prompt], context()) and applies(llama.decode_module(), [prompt], context())
    assert not applies(llama.prefill_module(), [prompt], context("generic"))
    assert not applies(torch.nn.Linear(2, 2), [prompt], context())
    gemma, ctx = _decoder("gemma3_text"), context()
    assert not applies(gemma.prefill_module(), [prompt], ctx) and "not gemma3_text" in ctx.info["llm_path"]
    ctx = context()
    assert not applies(llama.prefill_module(), [torch.zeros(2, 4, dtype=torch.int64)], ctx)
    assert "batch 1 only" in ctx.info["llm_path"]


@needs_executorch
@pytest.mark.slow  # two exports through export_llama (about 30 s each on 2 cores)
def test_llama_and_qwen2_decode_through_executorchs_llm_export_agree_with_eager(tmp_path):
    from conftest import load_results, run_cli

    proc = run_cli("--suite", "llm", "--size", "small", "--backends", "executorch", "--workloads",
                   "llama_decode,qwen2_decode", "--processes", "1", "--reference-processes", "1", "--time-budget", "1",
                   "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cells = [c for c in load_results(tmp_path)["cells"] if c["backend"] == "executorch"]
    assert len(cells) == 2
    for cell in cells:
        assert cell["status"] == "ok" and cell["decode"]["token_ids_agree"], cell.get("error")
        prefill = cell["info"]["prefill"]  # the program's custom ops, per layer: SDPA once, the cache written twice
        assert "export_llama" in prefill["llm_path"] and "llama::custom_sdpa.out" in prefill["custom_ops_registered"]
        assert prefill["delegation"]["portable_fallback"]["llama_custom_sdpa_default"] == 2
