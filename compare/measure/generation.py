"""Timing greedy generation: time to first token and time per output token.

One generation is a prefill on the prompt, its argmax (the first token), then one decode
step per further token, each fed the last token, its position and the caches the last
call returned. Every conversion between calls (``prepare`` of the next inputs,
``outputs_to_torch`` of the last outputs, the argmax) is inside the clock: a deployed
generation loop pays them too, and eager pays the same loop. Generations of the reference
and the backend alternate in ABBA order, as the cell table's calls do
(``compare.measure.timing.AlternatingSampler``, whose stopping rule this reuses with one
generation per sample).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from compare.measure.timing import AlternatingSampler, TimingConfig


@dataclass(frozen=True)
class DecodePair:
    """One backend's two compiled modules (``adapters.base.Compiled``)."""
    prefill: Any
    step: Any


@dataclass
class Generation:
    """What one greedy generation produced and how long its parts took."""
    tokens: list[list[int]]  # per new token, the ids of the batch
    ttft_s: float  # prefill, its conversions and the first argmax
    step_s: list[float]  # each decode step, conversions and argmax included
    logits: list[Any] = field(default_factory=list)  # per new token (only when asked for)

    @property
    def total_s(self) -> float:
        return self.ttft_s + sum(self.step_s)


def call(compiled, inputs: Sequence[Any]) -> list[Any]:
    """One call of a compiled module on torch inputs, its outputs back as torch tensors."""
    raw = compiled.run(compiled.prepare(inputs))
    compiled.synchronize()
    return compiled.outputs_to_torch(raw)


def generate(pair: DecodePair, prompt, new_tokens: int, keep_logits: bool = False,
             forced: list[list[int]] | None = None) -> Generation:
    """Greedy generation of ``new_tokens`` tokens after ``prompt[B, P]``, timed in parts;
    with ``forced`` (per new token, the batch's ids), those tokens are fed instead of the
    argmax (teacher forcing: a quantized model read on fp32 eager's sequence)."""
    import torch

    def chosen(logits, index: int):
        if forced is None:
            return logits.argmax(-1, keepdim=True)
        return torch.tensor(forced[index], dtype=torch.int64, device=prompt.device).view(-1, 1)

    start = time.perf_counter()
    logits, k_cache, v_cache = call(pair.prefill, [prompt])
    token = chosen(logits, 0)
    out = Generation([token[:, 0].tolist()], time.perf_counter() - start, [], [logits.clone()] if keep_logits else [])
    for index in range(new_tokens - 1):
        begin = time.perf_counter()
        position = torch.tensor([prompt.shape[1] + index], dtype=torch.int64, device=prompt.device)
        logits, k_cache, v_cache = call(pair.step, [token, position, k_cache, v_cache])
        token = chosen(logits, index + 1)
        out.step_s.append(time.perf_counter() - begin)
        out.tokens.append(token[:, 0].tolist())
        if keep_logits:
            out.logits.append(logits.clone())
    return out


class GenerationSampler(AlternatingSampler):
    """Whole generations of each candidate in turn, round after round (ABBA), one
    generation per sample: its total is the sample, and its first-token and per-step
    seconds are kept beside (``ttft_s``, ``step_s``). Warm-up: generations of each until
    ``warmup_s`` has passed (at least one)."""

    def __init__(self, candidates: Sequence[DecodePair], prompt, new_tokens: int, config: TimingConfig):
        self.pairs, self.prompt, self.new_tokens = list(candidates), prompt, new_tokens
        self.candidates = []  # AlternatingSampler's Timed callables: unused, generations are sampled here
        self.config = config
        self.single_s = [self._warm_up(pair) for pair in self.pairs]
        self.numbers = [1] * len(self.pairs)
        self.requests = [1] * len(self.pairs)  # a sample is one generation
        self.samples: list[list[float]] = [[] for _ in self.pairs]
        self.ttft_s: list[list[float]] = [[] for _ in self.pairs]
        self.step_s: list[list[float]] = [[] for _ in self.pairs]
        self.rounds = 0
        self.sampling_s = 0.0

    def _warm_up(self, pair: DecodePair) -> float:
        deadline = time.perf_counter() + self.config.warmup_s
        last = generate(pair, self.prompt, self.new_tokens).total_s
        while time.perf_counter() < deadline:
            last = generate(pair, self.prompt, self.new_tokens).total_s
        return last

    @property
    def warm_calls(self) -> bool:
        return False  # a generation is many calls: no untimed one between samples

    def take_rounds(self, count: int) -> None:
        start = time.perf_counter()
        order = list(range(len(self.pairs)))
        for _ in range(count):
            for i in (order if self.rounds % 2 == 0 else order[::-1]):
                made = generate(self.pairs[i], self.prompt, self.new_tokens)
                self.samples[i].append(made.total_s)
                self.ttft_s[i].append(made.ttft_s)
                self.step_s[i].extend(made.step_s)
            self.rounds += 1
        self.sampling_s += time.perf_counter() - start

    def parts_ms(self, index: int) -> dict[str, list[float]]:
        """Candidate ``index``'s first-token and per-step milliseconds, every generation pooled."""
        return {"ttft_ms": [s * 1e3 for s in self.ttft_s[index]], "step_ms": [s * 1e3 for s in self.step_s[index]]}
