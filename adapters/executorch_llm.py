"""ExecuTorch's own LLM path for the decode suite, as its ``export_llm`` makes a Llama or
Qwen2 program: the decoder re-built as ExecuTorch's ``llama_transformer``
(``examples/models/llama``) from the transformers model's config and weights (mapped by
name, as ExecuTorch's ``convert_weights`` does for SmolLM2 and Qwen2.5), with its source
transformations (``use_sdpa_with_kv_cache``: the custom SDPA op ``llama::custom_sdpa`` and
the KV cache as mutable buffers written by ``llama::update_cache``), exported with a
dynamic token dimension and lowered to XNNPACK by ``export_llama``'s own steps
(``_prepare_for_llama_export``, ``_to_edge_and_lower_llama_xnnpack`` with the extended
fp32 partitioner). One program, one method ``forward(tokens[1, n], input_pos[1])`` ->
last-token logits, serves both the prefill and the decode step: the caches live inside it,
so the two compiled modules share one loaded method, and a generation restarts at
position 0 (ExecuTorch's SDPA reads only the slots before its position).

Batch 1, fp32, Llama and Qwen2 only: other decoder cells take the generic path
(``adapters/executorch.py``), and say why (``info.llm_path``); ``--executorch-llm-path
generic`` gives every cell that path, for an A/B."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Sequence

from .base import BackendUnavailable, CompileContext, Compiled, CompileResult

MODEL_TYPES = ("llama", "qwen2")  # what llama_transformer takes (params: attention_qkv_bias for Qwen2)
# transformers' parameter names -> llama_transformer's (ExecuTorch's _QWEN_2_5_FROM_META, inverted)
WEIGHT_NAMES = [(r"model\.embed_tokens\.weight", "tok_embeddings.weight"), (r"model\.norm\.weight", "norm.weight"),
                (r"lm_head\.weight", "output.weight"),
                (r"model\.layers\.(\d+)\.self_attn\.([qkv])_proj\.(weight|bias)", r"layers.\1.attention.w\2.\3"),
                (r"model\.layers\.(\d+)\.self_attn\.o_proj\.weight", r"layers.\1.attention.wo.weight"),
                (r"model\.layers\.(\d+)\.input_layernorm\.weight", r"layers.\1.attention_norm.weight"),
                (r"model\.layers\.(\d+)\.post_attention_layernorm\.weight", r"layers.\1.ffn_norm.weight"),
                (r"model\.layers\.(\d+)\.mlp\.gate_proj\.weight", r"layers.\1.feed_forward.w1.weight"),
                (r"model\.layers\.(\d+)\.mlp\.down_proj\.weight", r"layers.\1.feed_forward.w2.weight"),
                (r"model\.layers\.(\d+)\.mlp\.up_proj\.weight", r"layers.\1.feed_forward.w3.weight")]
LLM_PATH = ("ExecuTorch export_llama: llama_transformer from the transformers weights, custom SDPA and KV-cache ops "
            "(llama::custom_sdpa, llama::update_cache), XNNPACK (dynamic-quant and fp32 partitioners)")


def applies(module: Any, example_inputs: Sequence[Any], ctx: CompileContext) -> bool:
    """A transformers Llama or Qwen2 decoder's fp32 prefill or decode step at batch 1, with
    --executorch-llm-path export-llm; for another decoder the cell records why the generic
    path takes it."""
    import torch

    if type(module).__name__ not in ("HFPrefill", "HFDecodeStep") or ctx.weight_bits is not None:
        return False
    if getattr(ctx.options, "executorch_llm_path", "generic") != "export-llm":
        return False
    model_type = module.decoder.lm.config.model_type
    why = (f"llama_transformer takes Llama and Qwen2, not {model_type}" if model_type not in MODEL_TYPES else
           "batch 1 only (max_batch_size 1)" if int(example_inputs[0].shape[0]) != 1 else
           "fp32 only here" if any(p.dtype != torch.float32 for p in module.parameters()) else None)
    if why is not None:
        ctx.info["llm_path"] = f"generic lowering: ExecuTorch's LLM export does not apply ({why})"
    return why is None


def compile_part(module: Any, example_inputs: Sequence[Any], ctx: CompileContext,
                 summarize: Callable[[Any], dict[str, Any]]) -> CompileResult:
    """The prefill (which builds the decoder's one program) or the decode step (which reuses
    it); ``summarize``: the adapter's delegation summary of a lowered graph."""
    decoder = module.decoder
    program = getattr(decoder, "_executorch_llm", None)
    if program is None:
        program = decoder._executorch_llm = _build(decoder, ctx, summarize)
    else:
        ctx.info["program"] = "the prefill's (one program, its KV cache inside)"
    ctx.info.update(llm_path=LLM_PATH, delegation=program["delegation"], pte_bytes=program["pte_bytes"])
    step = type(module).__name__ == "HFDecodeStep"
    return CompileResult(ExecutorchLlmPart(program["method"], program["keep_alive"], step), info=ctx.info)


class ExecutorchLlmPart(Compiled):
    """The prefill (``ids`` at position 0) or the decode step (``token`` at ``position``) on
    the shared method; the caches the decode loop passes are placeholders (they live in the
    program), returned empty."""

    def __init__(self, method, keep_alive, step: bool):
        import torch

        self._method, self._keep_alive, self._step = method, keep_alive, step
        self._start = torch.zeros(1, dtype=torch.int64)
        self.empty = torch.empty(0)

    def prepare(self, inputs: Sequence[Any]) -> Any:
        if self._step:
            token, position = inputs[0], inputs[1]
            return [token.detach().contiguous(), position.detach().reshape(1).to(self._start.dtype)]
        return [inputs[0].detach().contiguous(), self._start]

    def run(self, prepared: Any) -> Any:
        return self._method.execute(prepared)

    def outputs_to_torch(self, outputs: Any) -> list[Any]:
        logits = outputs[0].clone()  # the runtime's planned memory: the next call overwrites it
        return [logits.reshape(1, -1), self.empty, self.empty]


def _build(decoder, ctx: CompileContext, summarize: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    import torch
    from executorch.examples.models.llama.export_llama_lib import (
        _prepare_for_llama_export,
        _to_edge_and_lower_llama_xnnpack,
    )

    folder = Path(ctx.work_dir) / "export_llm"
    folder.mkdir(parents=True, exist_ok=True)
    with ctx.phase("export"):
        (folder / "params.json").write_text(json.dumps(llama_params(decoder.lm.config)))
        torch.save(llama_weights(decoder.lm.state_dict()), folder / "checkpoint.pth")
        config = llm_config(folder, decoder.max_len)
        builder = _prepare_for_llama_export(config).export()
        builder.run_canonical_optimizations()
    with ctx.phase("lower"):
        builder = _to_edge_and_lower_llama_xnnpack(builder, builder.modelname, [], None, [], None,
                                                   xnnpack_extended_ops=True)
    delegation = summarize(builder.edge_manager.exported_program().graph_module)
    buffer = builder.export_program.buffer
    method, program = _load(buffer, ctx)
    return {"method": method, "keep_alive": program, "delegation": delegation, "pte_bytes": len(buffer)}


def _load(buffer: bytes, ctx: CompileContext):
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401  (registers llama:: kernels)
    from executorch.extension.pybindings import portable_lib
    from executorch.runtime import Runtime

    with ctx.phase("load"):
        portable_lib._unsafe_reset_threadpool(ctx.threads)
        program = Runtime.get().load_program(buffer)
        method = program.load_method("forward")
    ctx.info["custom_ops_registered"] = sorted(n for n in portable_lib._get_operator_names() if n.startswith("llama::"))
    ctx.info["xnnpack_threadpool_threads_observed"] = portable_lib._threadpool_get_thread_count()
    return method, program


def llm_config(folder: Path, max_len: int):
    """export_llama's configuration, as its XNNPACK fp32 recipe sets it."""
    from executorch.extension.llm.export.config.llm_config import DtypeOverride, LlmConfig, ModelType

    config = LlmConfig()
    config.base.model_class = ModelType.llama3  # a llama_transformer model from params and checkpoint
    config.base.params, config.base.checkpoint = str(folder / "params.json"), str(folder / "checkpoint.pth")
    config.model.use_kv_cache = config.model.use_sdpa_with_kv_cache = config.model.enable_dynamic_shape = True
    config.model.dtype_override = DtypeOverride.fp32
    config.export.max_seq_length = config.export.max_context_length = max_len
    config.export.output_dir = str(folder)
    config.backend.xnnpack.enabled = config.backend.xnnpack.extended_ops = True
    return config


def llama_params(config) -> dict[str, Any]:
    """llama_transformer's ModelArgs (params.json) from a transformers Llama or Qwen2 config."""
    rope = getattr(config, "rope_theta", None) or (getattr(config, "rope_parameters", None) or {}).get("rope_theta")
    params = {"dim": config.hidden_size, "hidden_dim": config.intermediate_size, "n_heads": config.num_attention_heads,
              "n_kv_heads": config.num_key_value_heads, "n_layers": config.num_hidden_layers,
              "vocab_size": config.vocab_size, "norm_eps": config.rms_norm_eps, "rope_theta": rope,
              "head_dim": getattr(config, "head_dim", None), "use_hf_rope": True, "use_scaled_rope": False,
              "attention_qkv_bias": config.model_type == "qwen2"}
    return {k: v for k, v in params.items() if v is not None}


def llama_weights(state_dict: dict[str, Any]) -> dict[str, Any]:
    """transformers' weights under llama_transformer's names; a tied output takes the embedding."""
    mapped = {}
    for name, tensor in state_dict.items():
        target = next((re.sub(p, r, name) for p, r in WEIGHT_NAMES if re.fullmatch(p, name)), None)
        if target is None:
            raise BackendUnavailable(f"ExecuTorch's LLM export: no llama_transformer weight for {name}")
        mapped[target] = tensor.detach().clone()
    mapped.setdefault("output.weight", mapped["tok_embeddings.weight"])
    return mapped
