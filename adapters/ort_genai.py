"""ONNX Runtime GenAI: the decoder as ORT GenAI's own model builder writes it (one ONNX graph
with its past key/value state, GroupQueryAttention, MatMulNBits at int4), run by its
``Generator``, which keeps the KV cache inside. This is the path ORT GenAI's engineers ship
for CPU LLMs (``python -m onnxruntime_genai.models.builder -i DIR -o OUT -p fp32 -e cpu``).

The builder reads a local folder: the transformers model saved with its seeded weights, and
a minimal word-level tokenizer of the model's vocabulary size (the builder loads one; no
text is ever tokenized here: the prompt is token ids). The session uses the run's threads.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Sequence

from .base import Backend, BackendUnavailable, CompileContext, CompileResult
from .llm_session import SessionPart, shared_session

# --dtype -> the builder's precision; int4wo is ORT GenAI's own int4 (MatMulNBits, CPU defaults).
PRECISIONS = {"fp32": "fp32", "int4wo": "int4"}


def write_tokenizer(folder: Path, vocab_size: int, eos: int) -> None:
    """A word-level tokenizer with one token per id (``t0``...), ``eos`` its end token: what the
    builder needs to read."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="t0", eos_token=f"t{eos}").save_pretrained(folder)


def set_threads(genai_config: Path, threads: int) -> None:
    """The run's thread count in the session options ORT GenAI reads (as the ORT adapter sets it)."""
    config = json.loads(genai_config.read_text())
    options = config["model"]["decoder"].setdefault("session_options", {})
    options.update(intra_op_num_threads=threads, inter_op_num_threads=1)
    genai_config.write_text(json.dumps(config, indent=2))


def flatten_per_layer_rope(config: Any) -> bool:
    """transformers 5 keeps Gemma 3's RoPE per layer type (``rope_parameters`` =
    ``{"full_attention": {...}, "sliding_attention": {...}}``); ORT GenAI 0.18's Gemma 3 builder
    reads transformers 4's flat fields (``rope_theta``, ``rope_local_base_freq``, a flat
    ``rope_parameters``) and stops at ``KeyError: 'rope_type'``. Writes the flat fields; True
    when it did."""
    params = getattr(config, "rope_parameters", None)
    if not (isinstance(params, dict) and {"full_attention", "sliding_attention"} <= set(params)):
        return False
    config.rope_theta = params["full_attention"]["rope_theta"]
    config.rope_local_base_freq = params["sliding_attention"]["rope_theta"]
    config.rope_parameters = dict(params["full_attention"])
    return True


@contextmanager
def gemma3_rope_for_the_builder(info: dict[str, Any]):
    """The builder's Gemma 3 class given transformers 4's flat RoPE fields while it builds."""
    from onnxruntime_genai.models import builder

    gemma3 = builder.Gemma3Model  # the builder imports its classes as a top-level `builders` package
    original = gemma3.__init__

    def init(self, config, *args, **kwargs):
        if type(self) is gemma3 and flatten_per_layer_rope(config):
            info["rope_shim"] = "per-layer-type rope_parameters flattened for the 0.18 builder (Gemma 3)"
        original(self, config, *args, **kwargs)
    gemma3.__init__ = init
    try:
        yield
    finally:
        gemma3.__init__ = original


class GenAISession:
    """One ``Generator``: its KV state serves the prefill and every decode step."""

    def __init__(self, model: Any, max_length: int):
        import torch

        self.model, self.max_length = model, max_length
        self.generator: Any = None
        self.empty = torch.empty(0)  # the placeholder caches the decode loop passes back

    def eval(self, tokens: list[int], start: int):
        import numpy as np
        import onnxruntime_genai as og
        import torch

        if start == 0:  # a new sequence: a fresh generator (its KV cache empty)
            params = og.GeneratorParams(self.model)
            params.set_search_options(max_length=self.max_length, do_sample=False)
            self.generator = og.Generator(self.model, params)
        elif self.generator is None or self.generator.token_count() != start:
            raise RuntimeError(f"ORT GenAI's generator holds {self.generator and self.generator.token_count()} "
                               f"tokens; the step asks for position {start}")
        self.generator.append_tokens(np.asarray([tokens], dtype=np.int32))
        logits = np.asarray(self.generator.get_logits())
        return torch.from_numpy(logits.reshape(1, -1).astype(np.float32, copy=True))


class OrtGenAIBackend(Backend):
    name = "ort-genai"
    rank = 25
    description = "ONNX Runtime GenAI: its model builder's decoder (past KV state, GQA) run by its Generator"
    packages = ("onnxruntime-genai",)
    install_hint = "pip install -e '.[ortgenai]'"
    runtime_modules = ("onnxruntime_genai", "onnxruntime_genai.models.builder")

    def required_modules(self) -> tuple[str, ...]:
        return ("onnxruntime_genai",)

    def unavailable_for(self, tags: Sequence[str]) -> str | None:
        from workloads.llm import LLM_TAG

        if LLM_TAG not in tags:
            return "ORT GenAI runs decoder LLMs only: the decode suite (--suite llm)"
        return super().unavailable_for(tags)

    def weight_only_recipe(self, bits: int) -> dict[str, Any] | None:
        if bits != 4:
            return None
        return {"quantizer": "ORT GenAI's model builder -p int4 -e cpu (MatMulNBits)",
                "weights": "int4, the builder's CPU defaults (blocks of 32, accuracy level 4)",
                "activations": "fp32; quantized to int8 inside MatMulNBits (accuracy level 4)"}

    def settings(self, ctx: CompileContext) -> dict[str, Any]:
        return {"intra_op_num_threads": ctx.threads, "inter_op_num_threads": 1, "execution_provider": "cpu",
                "search": "greedy", "vocabulary": "word-level, one token per id"}

    def compile(self, module: Any, example_inputs: Sequence[Any], ctx: CompileContext) -> CompileResult:
        """The prefill builds and loads the model; the decode step takes the same session."""
        session, part = shared_session(module, example_inputs, "ORT GenAI", lambda decoder: self._load(decoder, ctx))
        return CompileResult(SessionPart(session, part), info=ctx.info)

    def _load(self, decoder: Any, ctx: CompileContext) -> GenAISession:
        import onnxruntime_genai as og
        import torch
        from onnxruntime_genai.models import builder

        dtype = "int4wo" if ctx.weight_bits == 4 else {torch.float32: "fp32"}.get(next(decoder.lm.parameters()).dtype)
        if ctx.weight_bits not in (None, 4) or dtype not in PRECISIONS:
            raise BackendUnavailable(f"dlcompare builds ORT GenAI models at {', '.join(PRECISIONS)}")
        source, out = ctx.work_dir / "hf", ctx.work_dir / "genai"
        config = decoder.lm.config
        with ctx.phase("save"):
            # The builder needs an end-of-sequence id inside the vocabulary; Qwen2's config names
            # none, and the builder then took one past its end (151936 of 151936), which ORT GenAI
            # refuses. The last id stands in (the decode loop never stops at it).
            eos = config.eos_token_id if config.eos_token_id is not None else config.vocab_size - 1
            config.eos_token_id, restore = eos, config.eos_token_id
            try:
                decoder.lm.save_pretrained(source)
            finally:
                config.eos_token_id = restore
            write_tokenizer(source, config.vocab_size, eos if isinstance(eos, int) else eos[0])
        with ctx.phase("build"):
            options = builder.parse_extra_options("", str(source), str(out), PRECISIONS[dtype], "cpu",
                                                  str(ctx.work_dir / "cache"), [])
            try:
                with gemma3_rope_for_the_builder(ctx.info):
                    builder.create_model("", str(source), str(out), PRECISIONS[dtype], "cpu", str(ctx.work_dir / "cache"),
                                         **options)
            except Exception as exc:  # name the step: the builder's own errors say nothing of it
                raise RuntimeError(f"ORT GenAI's model builder failed on {config.model_type}: "
                                   f"{type(exc).__name__}: {exc}") from exc
            set_threads(out / "genai_config.json", ctx.threads)
        ctx.info["genai"] = {"precision": PRECISIONS[dtype], "onnx_bytes": sum(
            f.stat().st_size for f in out.glob("model.onnx*"))}
        with ctx.phase("load"):
            model = og.Model(str(out))
        # GroupQueryAttention's sliding-window cache must hold the whole window (Gemma 3: 512),
        # even when the sequence is shorter; a longer cache changes nothing the sequence reads.
        return GenAISession(model, max(decoder.max_len, getattr(config, "sliding_window", None) or 0))
