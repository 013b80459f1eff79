"""The LLM decode suite's decoder, with its prefill and decode-step modules (workloads/llm.py says how they run)."""
from __future__ import annotations

import math

import torch
from torch import nn

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
