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

import math

import torch
from torch import nn

from .base import TensorSpec, Workload

LLM_TAG = "llm-decode"  # the worker runs these as greedy generation (compare/worker/decode.py)
# Additive mask, not -inf: stays finite in fp16/bf16 and through every exporter (as workloads/models.py).
MASKED = -1e4


class Block(nn.Module):
    """Pre-LN GPT-2 block; attention takes its keys and values from the caller."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.act = nn.GELU(approximate="tanh")

    def qkv_heads(self, x):
        """q, k, v of ``x[B, S, dim]``, each ``[B, H, S, D]``."""
        b, s, _ = x.shape
        qkv = self.qkv(self.ln1(x)).reshape(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return qkv[0], qkv[1], qkv[2]

    def finish(self, x, q, k, v, mask):
        """The residual stream after attending ``q`` over ``k, v`` (additive ``mask``) and the MLP."""
        b, s, d = x.shape
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim)) + mask
        out = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(out)
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


class DecoderLM(nn.Module):
    """Radford et al. 2019's shape: learned positions up to ``max_len``, pre-LN blocks,
    tied embeddings. Logits are scaled up (``logit_scale``) so that random weights give a
    clear greedy choice: with GPT-2's 0.02 init the top two logits of a random model lie
    within rounding of each other, and the token ids would compare rounding, not compilers."""

    def __init__(self, vocab: int, dim: int, heads: int, layers: int, max_len: int, logit_scale: float = 50.0):
        super().__init__()
        self.max_len, self.logit_scale = max_len, logit_scale
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Parameter(torch.randn(max_len, dim) * 0.1)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        nn.init.normal_(self.tokens.weight, std=0.02)
        causal = torch.triu(torch.full((max_len, max_len), MASKED), diagonal=1)
        self.register_buffer("causal", causal, persistent=False)
        self.register_buffer("slots", torch.arange(max_len), persistent=False)

    def logits(self, x):
        """Next-token logits of the residual stream ``x[B, S, dim]``: ``[B, S, V]``."""
        return torch.matmul(self.ln_f(x), self.tokens.weight.t()) * self.logit_scale

    def forward(self, ids):
        """The uncached forward over the whole sequence: logits at every position."""
        s = ids.shape[1]
        x = self.tokens(ids) + self.positions[:s]
        for block in self.blocks:
            q, k, v = block.qkv_heads(x)
            x = block.finish(x, q, k, v, self.causal[:s, :s])
        return self.logits(x)

    def prefill_module(self) -> "Prefill":
        return Prefill(self)

    def decode_module(self) -> "DecodeStep":
        return DecodeStep(self)


class Prefill(nn.Module):
    """``ids[B, P] -> (logits_last[B, V], k_cache[L, B, H, max_len, D], v_cache)``."""

    def __init__(self, lm: DecoderLM):
        super().__init__()
        self.lm = lm

    def forward(self, ids):
        lm, s = self.lm, ids.shape[1]
        x = lm.tokens(ids) + lm.positions[:s]
        keys, values = [], []
        for block in lm.blocks:
            q, k, v = block.qkv_heads(x)
            x = block.finish(x, q, k, v, lm.causal[:s, :s])
            pad = (0, 0, 0, lm.max_len - s)  # the empty slots after the prompt: zeros
            keys.append(nn.functional.pad(k, pad))
            values.append(nn.functional.pad(v, pad))
        return lm.logits(x[:, -1:])[:, 0], torch.stack(keys), torch.stack(values)


class DecodeStep(nn.Module):
    """``(token[B, 1], position[1], k_cache, v_cache) -> (logits[B, V], k_cache, v_cache)``."""

    def __init__(self, lm: DecoderLM):
        super().__init__()
        self.lm = lm

    def forward(self, token, position, k_cache, v_cache):
        lm = self.lm
        x = lm.tokens(token) + lm.positions.index_select(0, position)
        write = (lm.slots == position).reshape(1, 1, -1, 1)  # the slot this token fills
        # slots after the position hold nothing yet (or a stale value): masked out
        mask = torch.where(lm.slots <= position, 0.0, MASKED).to(x.dtype)
        keys, values = [], []
        for index, block in enumerate(lm.blocks):
            q, k, v = block.qkv_heads(x)
            k_all = torch.where(write, k, k_cache[index])
            v_all = torch.where(write, v, v_cache[index])
            x = block.finish(x, q, k_all, v_all, mask)
            keys.append(k_all)
            values.append(v_all)
        return lm.logits(x)[:, 0], torch.stack(keys), torch.stack(values)


def _prompt(p) -> list[TensorSpec]:
    return [TensorSpec((p["batch"], p["prompt"]), dtype="int64", name="prompt_ids", init=f"randint:{p['vocab']}")]


def _build(p) -> DecoderLM:
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
