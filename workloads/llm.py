"""The LLM decode suite: real decoder architectures (transformers' Llama, Qwen2 and Gemma 3
at their published sizes, built from the zoo's configs with seeded random weights) and a
hand-written GPT-2-shaped toy, the small test case, each with a static KV cache.

Greedy generation in two modules over one set of weights, as deployment compilers take
it (static shapes, the cache padded to a maximum length):

- ``Prefill``: ``ids[B, P] -> (logits_last[B, V], k_cache, v_cache)``, the caches
  ``[L, B, H, max_len, D]`` with the prompt's keys and values in slots ``0..P-1``, zeros after;
- ``DecodeStep``: ``(token[B, 1], position[1], k_cache, v_cache) -> (logits[B, V], k_cache,
  v_cache)``: the token's key and value written into slot ``position``, attention over
  slots ``<= position``.

The cache write is a ``where`` over a one-hot of the slot, not an indexed store, and the
position enters as a tensor: every frontend lowers both, and the shapes never change, so
nothing recompiles from step to step. ``DecoderLM.forward`` is the uncached full forward,
the reference the cache is tested against.
"""
from __future__ import annotations

from typing import Any

from .base import TensorSpec, Workload, WorkloadError, lazy

LLM_TAG = "llm-decode"  # the worker runs these as greedy generation (compare/worker/decode.py)

# The modules live in workloads/nets/ and import torch when a worker first builds one: the
# parent only plans runs, and importing torch there cost every run 2 s.
DecoderLM = lazy("nets.llm", "DecoderLM")


def _prompt(p) -> list[TensorSpec]:
    return [TensorSpec((p["batch"], p["prompt"]), dtype="int64", name="prompt_ids", init=f"randint:{p['vocab']}")]


def _build(p) -> Any:
    if p["prompt"] + p["new_tokens"] - 1 > p["max_len"]:
        raise ValueError(f"prompt {p['prompt']} + {p['new_tokens']} new tokens do not fit max_len {p['max_len']}")
    return DecoderLM(p["vocab"], p["dim"], p["heads"], p["layers"], p["max_len"])


def with_lengths(workload: Workload, prompt: int | None = None, new_tokens: int | None = None) -> Workload:
    """A decode workload at ``--prompt-len`` and ``--gen-len`` (None: its own), its cache
    sized to hold them; any other workload unchanged. A model whose positions cannot hold
    them is a WorkloadError, one line."""
    import dataclasses

    if LLM_TAG not in workload.tags or (prompt is None and new_tokens is None):
        return workload
    sizes = {}
    for size, params in workload.sizes.items():
        p = {**params, **({"prompt": prompt} if prompt else {}), **({"new_tokens": new_tokens} if new_tokens else {})}
        p["max_len"] = p["prompt"] + p["new_tokens"]
        if p.get("positions") and p["max_len"] > p["positions"]:
            raise WorkloadError(f"{workload.name} at size {size}: a prompt of {p['prompt']} tokens and {p['new_tokens']} new ones "
                                f"need {p['max_len']} positions; the model has {p['positions']}")
        sizes[size] = p
    return dataclasses.replace(workload, sizes=sizes)


# The real decoders, by zoo entry (workloads/zoo/configs): llama-bench's pp and tg at a
# 128-token prompt and 128 new tokens at the published size (--prompt-len 512 for pp512).
HF_DECODERS = {"llama_decode": "llama", "qwen2_decode": "qwen2", "gemma3_decode": "gemma3"}
HF_LENGTHS = {"small": (8, 8), "default": (128, 128)}


# The model types whose cache the decode suite's wrapper (nets/hf_decoder.py) is tested on:
# the MoE decoders too (their experts change nothing in the cache: tests/test_intake.py, qwen3_moe).
DECODE_MODEL_TYPES = ("llama", "qwen2", "gemma3_text", "olmoe", "granitemoe", "qwen3_moe")


def _hf_sizes(origin: str, entry: dict[str, Any], names: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    from .zoo import sized_config

    sizes = {}
    for size in names:
        prompt, new_tokens = HF_LENGTHS[size]
        config = sized_config(entry, size)
        sizes[size] = {"origin": origin, "size": size, "batch": 1, "prompt": prompt, "weights": entry.get("weights"),
                       "new_tokens": new_tokens, "max_len": prompt + new_tokens, "vocab": int(config["vocab_size"]),
                       "positions": config.get("max_position_embeddings") or config.get("n_positions")}
    return sizes


def decode_workload(name: str, entry: dict[str, Any], origin: str, sizes: tuple[str, ...]) -> Workload:
    """A causal LM's greedy generation (``origin``: ``zoo:<name>``, or a user's ``hf:`` spec,
    whose folder's own weights are used when it has them)."""
    weights = " (its own weights)" if entry.get("weights") else ""
    return Workload(
        name=name,
        description=f"{entry['title']}{weights}: greedy generation with a static KV cache (transformers' own model, "
                    f"its cache as explicit tensors); prefill (pp) and decode (tg) tokens/s",
        sizes=_hf_sizes(origin, entry, sizes),
        build=lazy("zoo.build", "hf_decoder"),
        inputs=_prompt,
        tags=("llm", LLM_TAG),
        source=origin,
        batch_param="batch",
    )


def hf_decode_workload(name: str, zoo_name: str) -> Workload:
    from .zoo import load_entry

    return decode_workload(name, load_entry(zoo_name), f"zoo:{zoo_name}", tuple(HF_LENGTHS))


def real_decoders() -> list[Workload]:
    return [hf_decode_workload(name, zoo_name) for name, zoo_name in HF_DECODERS.items()]


TOY_WORKLOADS = [
    Workload(
        name="gpt2_decode",
        description="GPT-2-shaped decoder, greedy generation with a static KV cache padded to max_len: prefill "
                    "of the prompt, then one decode step per new token; default 4 x 256, 4 heads, vocab 2048",
        sizes={
            "small": {"batch": 1, "prompt": 8, "new_tokens": 8, "max_len": 16, "dim": 64, "heads": 2, "layers": 2,
                      "vocab": 256},
            "default": {"batch": 1, "prompt": 32, "new_tokens": 32, "max_len": 64, "dim": 256, "heads": 4,
                        "layers": 4, "vocab": 2048},
            "large": {"batch": 1, "prompt": 128, "new_tokens": 128, "max_len": 256, "dim": 768, "heads": 12,
                      "layers": 12, "vocab": 50257},
        },
        build=_build,
        inputs=_prompt,
        tags=("llm", LLM_TAG),
        batch_param="batch",
    ),
]
