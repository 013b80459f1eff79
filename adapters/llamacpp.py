"""llama.cpp through llama-cpp-python: the decode suite's transformers decoders written to
GGUF with the ``gguf`` package and run by llama.cpp's CPU backend (the ``[llamacpp]`` extra,
which builds llama.cpp from source at install).

Lowering, as llama.cpp's engineers do it: the model's own weights (the same seeded random
ones every backend gets) written to an F32 GGUF the way ``convert_hf_to_gguf.py`` names
and lays them out (``gguf.get_tensor_name_map``; Llama's q/k rows permuted back to
llama.cpp's rotary layout), with no vocabulary (``tokenizer.ggml.model = none`` and the
vocabulary size: llama.cpp adds dummy tokens); F16 for ``--dtype fp16``; Q8_0 and Q4_0
made from the F32 file by ``llama_model_quantize``, llama-quantize's own code.

Running: one ``llama_cpp.Llama`` context per cell, shared by the prefill and the decode
step, whose KV cache lives inside it. The prefill clears it and evaluates the prompt; a
step evaluates one token at the next position. The caches the decode loop passes around
are empty placeholders. llama.cpp's own counters (``llama_perf_context``) are read beside
dlcompare's clock.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from .base import Backend, BackendOptions, BackendUnavailable, CompileContext, CompileResult, option
from .llm_session import SessionPart, shared_session

# transformers class -> gguf.MODEL_ARCH member; Llama's and Granite's q/k need llama.cpp's rotary
# layout (convert_hf_to_gguf's LlamaModel and its GraniteModel subclass permute; OlmoeModel does not).
ARCHES = {"LlamaForCausalLM": "LLAMA", "Qwen2ForCausalLM": "QWEN2", "Gemma3ForCausalLM": "GEMMA3",
          "OlmoeForCausalLM": "OLMOE", "GraniteMoeForCausalLM": "GRANITE_MOE"}
PERMUTED = {"LLAMA", "GRANITE_MOE"}
# Granite's muP multipliers under llama.cpp's names (convert_hf_to_gguf's GraniteModel)
GRANITE_SCALES = {"attention_multiplier": "add_attention_scale", "embedding_multiplier": "add_embedding_scale",
                  "residual_multiplier": "add_residual_scale", "logits_scaling": "add_logit_scale"}
# Gemma's RMSNorm scales by (1 + weight); llama.cpp's by weight: convert_hf_to_gguf adds 1.
NORM_SHIFTED = {"GEMMA3"}
# --dtype -> (the file llama.cpp runs, the KV cache type): the cache follows the activations.
FILE_TYPES = {"fp32": ("F32", "F32"), "fp16": ("F16", "F16"), "bf16": ("BF16", "BF16"), "int8wo": ("Q8_0", "F32"),
              "int4wo": ("Q4_0", "F32")}
FLOAT_FILES = ("F32", "F16", "BF16")  # written by write_gguf; the rest quantized from F32
QUANTIZED_FTYPES = {"Q8_0": 7, "Q4_0": 2}  # llama_ftype: LLAMA_FTYPE_MOSTLY_Q8_0, _Q4_0
GGML_TYPES = {"F32": 0, "F16": 1, "BF16": 30}  # ggml_type for the KV cache
N_BATCH, N_UBATCH = 2048, 512  # llama-bench's defaults


@dataclass(frozen=True)
class LlamaCppOptions(BackendOptions):
    llamacpp_flash_attn: str = option(
        "auto", "llama.cpp's flash attention (default auto: on, as llama-bench's 'auto' is for the CPU, except "
        "at fp32, where ggml's CPU kernel is not fp32-exact; on; off: the separate softmax path)",
        flag="llamacpp-flash-attn", choices=("auto", "on", "off"))


def flash_attention(option: str, dtype: str) -> bool:
    """Whether the context uses flash attention. At pp512/tg128 on Zen 4, fp32 with it on parted
    from eager's tokens at token 28 (worst logit error 0.07), with it off agreed on all 128
    (2.7e-4): its CPU kernel does not keep fp32, so an fp32 cell runs the exact path."""
    return option == "on" or (option == "auto" and dtype != "fp32")


def dtype_name(ctx: CompileContext, module: Any) -> str:
    if ctx.weight_bits is not None:
        return {8: "int8wo", 4: "int4wo"}[ctx.weight_bits]
    weight = next(module.parameters())
    return {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}.get(str(weight.dtype).removeprefix("torch."), "other")


def permute_rotary(weight, heads: int):
    """HF's rotate-half rows -> llama.cpp's interleaved pairs (convert_hf_to_gguf's ``permute``)."""
    return (weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def write_gguf(lm: Any, path: Path, file_type: str) -> dict[str, Any]:
    """The transformers model's weights as a GGUF llama.cpp loads (F32, F16 or BF16); what it wrote."""
    import gguf
    import numpy as np

    config = lm.config
    arch_name = ARCHES.get(type(lm).__name__)
    if arch_name is None:
        raise BackendUnavailable(f"dlcompare's GGUF writer covers {', '.join(ARCHES)}; not {type(lm).__name__}")
    arch = getattr(gguf.MODEL_ARCH, arch_name)
    writer = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    _write_fields(writer, config, arch_name)
    writer.add_file_type({"F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16,
                          "BF16": gguf.LlamaFileType.MOSTLY_BF16}[file_type])
    tied = bool(getattr(config, "tie_word_embeddings", False))
    written = 0
    for target, data in _gguf_tensors(lm, arch, arch_name, tied):
        # 1-D tensors (norms, biases) stay F32, as convert_hf_to_gguf keeps them
        if file_type == "F16" and data.ndim > 1:
            writer.add_tensor(target, data.astype(np.float16))
        elif file_type == "BF16" and data.ndim > 1:  # bf16 bits, as convert_hf_to_gguf writes them
            bf16 = gguf.GGMLQuantizationType.BF16
            writer.add_tensor(target, gguf.quants.quantize(data, bf16), raw_dtype=bf16)
        else:
            writer.add_tensor(target, data)
        written += 1
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return {"arch": gguf.MODEL_ARCH_NAMES[arch], "tensors": written, "tied_output": tied,
            "experts": _experts(config), "bytes": path.stat().st_size}


def _experts(config: Any) -> tuple[int, int] | None:
    """(experts, experts per token) of a mixture-of-experts config; None for a dense one."""
    count = getattr(config, "num_experts", None) or getattr(config, "num_local_experts", None)
    return (int(count), int(config.num_experts_per_tok)) if count else None


def _write_fields(writer: Any, config: Any, arch_name: str) -> None:
    """The hyperparameters llama.cpp reads, as convert_hf_to_gguf's model class writes them."""
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)  # per expert in a MoE
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(rope_theta(config)))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    if getattr(config, "sliding_window", None):  # Gemma 3's local layers (llama.cpp sets their 5:1 pattern)
        writer.add_sliding_window(config.sliding_window)
    if (experts := _experts(config)) is not None:
        writer.add_expert_count(experts[0])
        writer.add_expert_used_count(experts[1])
    if arch_name == "GRANITE_MOE":
        for field, add in GRANITE_SCALES.items():
            getattr(writer, add)(float(getattr(config, field)))
    writer.add_tokenizer_model("none")


def _gguf_tensors(lm: Any, arch: Any, arch_name: str, tied: bool):
    """(GGUF name, float32 array) for each weight, in llama.cpp's names and layouts."""
    import gguf

    config = lm.config
    names = gguf.get_tensor_name_map(arch, config.num_hidden_layers)
    for name, tensor in lm.state_dict().items():
        if tied and name == "lm_head.weight":
            continue  # llama.cpp reads the output projection from token_embd when output.weight is absent
        data = tensor.detach().float().cpu().numpy()
        if name.endswith(("experts.gate_up_proj", "experts.down_proj", "router.weight")):
            yield from _expert_tensors(name, data)
            continue
        target = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if target is None:
            raise BackendUnavailable(f"no GGUF name for {name}")
        if arch_name in NORM_SHIFTED and name.endswith("norm.weight"):
            data = data + 1.0
        if arch_name in PERMUTED and name.endswith("q_proj.weight"):
            data = permute_rotary(data, config.num_attention_heads)
        elif arch_name in PERMUTED and name.endswith("k_proj.weight"):
            data = permute_rotary(data, config.num_key_value_heads)
        yield target, data


def _expert_tensors(name: str, data: Any):
    """transformers 5's fused experts as llama.cpp's stacked ones: gate_up_proj [experts, 2 x ffn,
    hidden] splits into ffn_gate_exps and ffn_up_exps (gate first, as the forward's ``chunk``);
    down_proj [experts, hidden, ffn] is ffn_down_exps; Granite's router is ffn_gate_inp."""
    block = f"blk.{int(name.split('layers.')[1].split('.')[0])}"
    if name.endswith("router.weight"):
        yield f"{block}.ffn_gate_inp.weight", data
    elif name.endswith("down_proj"):
        yield f"{block}.ffn_down_exps.weight", data
    else:
        ffn = data.shape[1] // 2
        yield f"{block}.ffn_gate_exps.weight", data[:, :ffn].copy()
        yield f"{block}.ffn_up_exps.weight", data[:, ffn:].copy()


def rope_theta(config: Any) -> float:
    """RoPE's base: transformers 5 keeps it in ``rope_parameters``, older configs at the top."""
    parameters = getattr(config, "rope_parameters", None) or {}
    parameters = parameters.get("full_attention", parameters)  # Gemma 3: per layer type; GGUF takes the global
    return parameters.get("rope_theta") or getattr(config, "rope_theta", None) or 10000.0


def quantize_gguf(source: Path, target: Path, file_type: str, threads: int) -> None:
    """llama-quantize's own code (``llama_model_quantize``) from the F32 file."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = QUANTIZED_FTYPES[file_type]
    params.nthread = threads
    if llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params)) != 0:
        raise RuntimeError(f"llama_model_quantize to {file_type} failed")


def per_second(count: int, ms: float) -> float | None:
    return count / ms * 1e3 if ms > 0 else None


class LlamaSession:
    """One llama.cpp context: the KV cache both parts share, and its logits as torch tensors."""

    def __init__(self, llm: Any):
        import torch

        self.llm = llm
        self.vocab = llm.n_vocab()
        self.empty = torch.empty(0)  # the placeholder caches the decode loop passes back

    def eval(self, tokens: list[int], start: int):
        import numpy as np
        import torch

        self.llm.n_tokens = start  # Llama.eval drops the cache from here on, then appends
        self.llm.eval(tokens)
        logits = np.ctypeslib.as_array(self.llm._ctx.get_logits_ith(-1), shape=(self.vocab,))
        return torch.from_numpy(logits.copy()).unsqueeze(0)

    def perf(self, reset: bool = False) -> dict[str, Any]:
        """llama.cpp's own counters since the last reset: prompt and generation tokens/s."""
        import llama_cpp

        data = llama_cpp.llama_perf_context(self.llm._ctx.ctx)
        if reset:
            llama_cpp.llama_perf_context_reset(self.llm._ctx.ctx)
        return {"source": "llama_perf_context", "prompt_tokens": data.n_p_eval, "prompt_ms": data.t_p_eval_ms,
                "pp_tokens_per_s": per_second(data.n_p_eval, data.t_p_eval_ms), "generated_tokens": data.n_eval,
                "generation_ms": data.t_eval_ms, "tg_tokens_per_s": per_second(data.n_eval, data.t_eval_ms)}


class LlamaCppCompiled(SessionPart):
    """A part on the llama.cpp session, with llama.cpp's own counters."""

    session: LlamaSession

    def own_timings(self, reset: bool = False) -> dict[str, Any] | None:
        return self.session.perf(reset)


class LlamaCppBackend(Backend):
    name = "llamacpp"
    rank = 90
    description = "llama.cpp (llama-cpp-python): the decoder written to GGUF, run by llama.cpp's CPU backend"
    packages = ("llama_cpp_python", "gguf")
    install_hint = "pip install -e '.[llamacpp]' (builds llama.cpp from source with CMake)"
    options_type = LlamaCppOptions
    runtime_modules = ("llama_cpp", "gguf")

    def required_modules(self) -> tuple[str, ...]:
        return ("llama_cpp", "gguf")

    def unavailable_for(self, tags: Sequence[str]) -> str | None:
        from workloads.llm import LLM_TAG

        if LLM_TAG not in tags:
            return "llama.cpp runs decoder LLMs only: the decode suite (--suite llm)"
        return super().unavailable_for(tags)

    def weight_only_recipe(self, bits: int) -> dict[str, Any] | None:
        kind = "Q8_0" if bits == 8 else "Q4_0"
        return {"quantizer": f"llama_model_quantize (llama-quantize's code) to {kind} from the F32 GGUF",
                "weights": f"{kind}: blocks of 32, one fp16 scale each" + (
                    "; llama-quantize's mix for an untied output projection (Q6_K)" if bits == 4 else ""),
                "activations": "fp32; quantized to 8 bits inside the Q8_0/Q4_0 dot products"}

    def settings(self, ctx: CompileContext) -> dict[str, Any]:
        return {"n_threads": ctx.threads, "n_threads_batch": ctx.threads, "n_batch": N_BATCH, "n_ubatch": N_UBATCH,
                "flash_attn": ctx.options.llamacpp_flash_attn, "use_mmap": True, "vocabulary": "none (dummy tokens)"}

    def compile(self, module: Any, example_inputs: Sequence[Any], ctx: CompileContext) -> CompileResult:
        """The prefill writes and loads the GGUF; the decode step takes the same session."""
        session, part = shared_session(module, example_inputs, "llama.cpp", lambda decoder: self._load(decoder, ctx))
        return CompileResult(LlamaCppCompiled(session, part), info=ctx.info)

    def _load(self, decoder: Any, ctx: CompileContext) -> LlamaSession:
        import llama_cpp

        dtype = dtype_name(ctx, decoder)
        if dtype not in FILE_TYPES:
            raise BackendUnavailable(f"dlcompare writes llama.cpp files at {', '.join(FILE_TYPES)}, not {dtype}")
        file_type, kv_type = FILE_TYPES[dtype]
        written = file_type if file_type in FLOAT_FILES else "F32"
        source = ctx.work_dir / f"model.{written.lower()}.gguf"
        with ctx.phase("write_gguf"):
            ctx.info["gguf"] = write_gguf(decoder.lm, source, written)
        path = source
        if file_type in QUANTIZED_FTYPES:
            path = ctx.work_dir / f"model.{file_type.lower()}.gguf"
            with ctx.phase("quantize"):
                quantize_gguf(source, path, file_type, ctx.threads)
            source.unlink()
        ctx.info["gguf"].update(file_type=file_type, kv_cache=kv_type.lower(), bytes=path.stat().st_size)
        ctx.info["flash_attn"] = flash_attention(ctx.options.llamacpp_flash_attn, dtype)
        with ctx.phase("load"):
            llm = llama_cpp.Llama(str(path), n_ctx=decoder.max_len, n_batch=N_BATCH, n_ubatch=N_UBATCH,
                                  n_threads=ctx.threads, n_threads_batch=ctx.threads, logits_all=False,
                                  flash_attn=ctx.info["flash_attn"], type_k=GGML_TYPES[kv_type],
                                  type_v=GGML_TYPES[kv_type], seed=ctx.seed, verbose=False)
        return LlamaSession(llm)

    @classmethod
    def status_notes(cls, info: dict[str, Any], tuning_s: float | None) -> list[str]:
        gguf = (info.get("prefill") or info).get("gguf") or {}
        return [f"GGUF {gguf['file_type']}, KV {gguf['kv_cache']}"] if gguf.get("file_type") else []
