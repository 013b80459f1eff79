"""The LLM decode suite: a GPT-2-shaped decoder with random weights and a KV cache.

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

from .base import TensorSpec, Workload, lazy

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


LLM_WORKLOADS = [
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
