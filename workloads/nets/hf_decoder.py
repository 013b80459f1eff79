"""A transformers causal LM as the decode suite takes it: a prefill and a decode step with
the KV cache as explicit tensors (``workloads/nets/llm.py``'s layout, ``[L, B, H_kv,
max_len, D]``), so every frontend lowers both and no step recompiles.

transformers' own ``StaticCache`` writes its buffers in place (``index_copy_``), which
``torch.compile`` takes but ONNX, OpenVINO and TVM frontends see as hidden state. Here
the model runs unchanged, with its own attention, RoPE and masks; only its cache is a
``SlotLayer`` per layer that takes the caches as inputs and returns them written: the
prompt's keys into slots ``0..P-1`` (a concatenation), a decode step's into slot
``position`` (a ``where`` over a one-hot), as the hand-written decoder does. The mask is
the model's own causal mask over ``max_len`` slots at the given positions.
"""
from __future__ import annotations

import torch
from torch import nn
from transformers.cache_utils import Cache, CacheLayerMixin


class SlotLayer(CacheLayerMixin):
    """One layer's cache over given tensors ``[B, H_kv, max_len, D]``, written from slot
    ``start`` (a module-level class: one defined per call breaks dynamo's graph)."""

    is_compileable = True
    is_sliding = False

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, start: torch.Tensor):
        super().__init__()
        self.keys, self.values, self.start = keys, values, start
        self.max_cache_len = keys.shape[2]
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states):
        pass

    def update(self, key_states, value_states, *args, **kwargs):
        length = key_states.shape[2]
        if length == 1:
            slot = torch.arange(self.max_cache_len, device=key_states.device) == self.start
            slot = slot.view(1, 1, -1, 1)
            self.keys = torch.where(slot, key_states, self.keys)
            self.values = torch.where(slot, value_states, self.values)
        else:  # the prompt, from slot 0
            self.keys = torch.cat([key_states, self.keys[:, :, length:]], dim=2)
            self.values = torch.cat([value_states, self.values[:, :, length:]], dim=2)
        return self.keys, self.values

    def get_mask_sizes(self, query_length):
        return self.max_cache_len, 0

    def get_seq_length(self):
        return self.start

    def get_max_length(self):
        return self.max_cache_len


def cache_shape(config) -> tuple[int, int, int]:
    """(layers, key/value heads, head dim) of a transformers decoder config."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = getattr(text, "num_attention_heads", None) or text.n_head
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    layers = getattr(text, "num_hidden_layers", None) or text.n_layer
    return layers, kv_heads, head_dim


class HFDecoder(nn.Module):
    """A transformers ``*ForCausalLM`` with ``prefill_module`` and ``decode_module`` (the
    decode suite's interface, as ``nets.llm.DecoderLM``); ``forward`` is the uncached
    full forward, the reference the cached generation is tested against."""

    def __init__(self, lm: nn.Module, max_len: int):
        super().__init__()
        self.lm = lm
        self.max_len = max_len
        self.layers, self.kv_heads, self.head_dim = cache_shape(lm.config)

    def forward(self, ids):
        return self.lm(input_ids=ids, use_cache=False).logits

    def run(self, ids, positions, k_cache, v_cache, start):
        cache = Cache(layers=[SlotLayer(k_cache[i], v_cache[i], start) for i in range(self.layers)])
        out = self.lm(input_ids=ids, position_ids=positions, cache=cache, use_cache=True)
        return (out.logits[:, -1], torch.stack([layer.keys for layer in cache.layers]),
                torch.stack([layer.values for layer in cache.layers]))

    def empty_cache(self, batch: int) -> torch.Tensor:
        weight = next(self.lm.parameters())
        return torch.zeros(self.layers, batch, self.kv_heads, self.max_len, self.head_dim, dtype=weight.dtype,
                           device=weight.device)

    def prefill_module(self) -> "HFPrefill":
        return HFPrefill(self)

    def decode_module(self) -> "HFDecodeStep":
        return HFDecodeStep(self)


class HFPrefill(nn.Module):
    """``ids[B, P] -> (logits_last[B, V], k_cache, v_cache)``, the prompt in slots ``0..P-1``."""

    def __init__(self, decoder: HFDecoder):
        super().__init__()
        self.decoder = decoder

    def forward(self, ids):
        batch, length = ids.shape
        empty = self.decoder.empty_cache(batch)
        positions = torch.arange(length, device=ids.device).unsqueeze(0)
        start = torch.zeros(1, dtype=torch.int64, device=ids.device)
        return self.decoder.run(ids, positions, empty, empty, start)


class HFDecodeStep(nn.Module):
    """``(token[B, 1], position[1], k_cache, v_cache) -> (logits[B, V], k_cache, v_cache)``."""

    def __init__(self, decoder: HFDecoder):
        super().__init__()
        self.decoder = decoder

    def forward(self, token, position, k_cache, v_cache):
        return self.decoder.run(token, position.view(1, 1), k_cache, v_cache, position)
