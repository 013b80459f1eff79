"""Timing, as torch.utils.benchmark and pyperf do it: warm up, calibrate a number of
calls per sample so the clock's resolution and the loop's overhead vanish, then take
samples until the median is known precisely enough or the time budget ends. The
reference and the candidate are sampled alternately (ABBA order) so machine drift
cancels out of their ratio."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from compare.measure.latency import LatencyStats
from compare.measure.stats import median_rel_se, summarize


@dataclass(frozen=True)
class TimingConfig:
    warmup_s: float = 0.2  # at least this long of warm-up calls (and >= 2 calls)
    min_sample_s: float = 0.01  # each sample runs enough calls to last this long
    min_samples: int = 10
    max_samples: int = 300
    budget_s: float = 8.0  # soft budget for the sampling loop of one cell
    target_rel_se: float = 0.005  # stop once the median's standard error is below 0.5 %
    # One untimed call before each sample: whatever the other callable left behind
    # (its pool's threads still spinning, caches full of its data) is absorbed there,
    # not timed as part of this one.
    sample_warmup: bool = True
    # Every sample of a round lasts about as long as the slowest callable's single call
    # (at most max_sample_s): eager beside a backend whose calls take a second is then
    # a mean over that second, not a 10 ms glimpse of whichever speed the machine was in.
    balance_samples: bool = True
    max_sample_s: float = 0.5
    # The single-stream scenario (MLPerf LoadGen's SingleStream): every sample is one
    # request, issued when the previous one has returned, so the samples are the
    # per-request latencies whose tail (p99, p99.9) the scenario reports. The stopping rule
    # then ignores the median's precision: a tail needs a count, not a precise median.
    per_request: bool = False
    # The offline scenario (MLPerf's Offline): every sample is one call of a stream pool that
    # issues many requests and returns when all completed (``Timed.requests`` of them, sized
    # to last about ``OFFLINE_SAMPLE_S``); a sample is then seconds per inference at full
    # throughput. No untimed call between samples (the pool's own drain is its warm-up).
    offline: bool = False


def sample_once(run: Callable[[Any], Any], arg: Any, number: int, sync: Callable[[], None],
                warm: bool = False) -> float:
    """Seconds per call over ``number`` back-to-back calls (after one untimed call when
    ``warm``). The loop is kept bare so the harness adds nothing measurable (see
    ``python -m compare overhead``)."""
    if warm:
        run(arg)
        sync()
    start = time.perf_counter()
    for _ in range(number):
        run(arg)
    sync()
    return (time.perf_counter() - start) / number


def warm_up(run: Callable[[Any], Any], arg: Any, sync: Callable[[], None], warmup_s: float) -> float:
    """Call until ``warmup_s`` has passed (at least twice, or once when that call alone
    lasted ``warmup_s``: the compile's first call came before it); the last call's seconds."""
    deadline = time.perf_counter() + warmup_s
    calls = 0
    last = 0.0
    while calls == 0 or (calls < 2 and last < warmup_s) or time.perf_counter() < deadline:
        last = sample_once(run, arg, 1, sync)
        calls += 1
    return last


def sample_seconds(single_s: Sequence[float], config: TimingConfig) -> float:
    """How long each sample of a round should last (see ``TimingConfig.balance_samples``)."""
    if not config.balance_samples or not single_s:
        return config.min_sample_s
    return max(config.min_sample_s, min(max(single_s), config.max_sample_s))


def calibrate(single_call_s: float, min_sample_s: float) -> int:
    return max(1, math.ceil(min_sample_s / max(single_call_s, 1e-9)))


# Offline: each sample's requests last about this long (a pool's start and drain amortized).
OFFLINE_SAMPLE_S = 0.2


@dataclass
class Timed:
    run: Callable[[Any], Any]
    arg: Any
    sync: Callable[[], None]
    requests: int = 1  # inferences one call of ``run`` issues (offline: a stream pool's batch of requests)


class AlternatingSampler:
    """Samples callables in turn, round after round, in ABBA order: the timing loop,
    in pieces. Calibration (warm-up, calls per sample) happens once at construction;
    ``take_rounds`` adds rounds; ``done`` applies the stopping rule: every median
    precise to ``target_rel_se``, or ``budget_s`` of sampling spent (both after
    ``min_samples``), or ``max_samples`` reached, or four times the budget (protection
    against pathologically slow calls). The runner can interleave several samplers, one
    per worker, so that every cell of a workload samples the same stretch of time."""

    def __init__(self, candidates: Sequence[Timed], config: TimingConfig):
        self.candidates = list(candidates)
        self.config = config
        self.single_s = [warm_up(c.run, c.arg, c.sync, config.warmup_s) for c in self.candidates]
        sample_s = sample_seconds(self.single_s, config)
        one_call = config.per_request or config.offline
        self.numbers = [1 if one_call else calibrate(single, sample_s) for single in self.single_s]
        self.requests = [c.requests for c in self.candidates]
        self.samples: list[list[float]] = [[] for _ in self.candidates]
        self.rounds = 0
        self.sampling_s = 0.0  # time spent in take_rounds, the budget's clock

    def take_rounds(self, count: int) -> None:
        start = time.perf_counter()
        order = list(range(len(self.candidates)))
        for _ in range(count):
            for i in (order if self.rounds % 2 == 0 else order[::-1]):
                c = self.candidates[i]
                self.samples[i].append(sample_once(c.run, c.arg, self.numbers[i], c.sync,
                                                   warm=self.warm_call(i)) / c.requests)
            self.rounds += 1
        self.sampling_s += time.perf_counter() - start

    @property
    def warm_calls(self) -> bool:
        """An untimed call before each sample; never between a single stream's requests, nor
        between offline samples (each already lasts ``OFFLINE_SAMPLE_S``)."""
        return self.config.sample_warmup and not (self.config.per_request or self.config.offline)

    def warm_call(self, index: int) -> bool:
        """The untimed call before candidate ``index``'s sample. Not for a call of at least
        ``max_sample_s``: what the other callable leaves behind (a few MB of cache, threads
        asleep) costs about a millisecond, under 0.2 % of such a call, and untuned TVM's 17 s
        calls doubled their cell's time with it."""
        return self.warm_calls and self.single_s[index] < self.config.max_sample_s

    def precise(self) -> bool:
        if self.config.per_request:
            return False
        return all(median_rel_se(s) <= self.config.target_rel_se for s in self.samples)

    def done(self) -> bool:
        cfg = self.config
        if self.rounds >= cfg.max_samples:
            return True
        if self.rounds >= cfg.min_samples:
            return self.precise() or self.sampling_s >= cfg.budget_s
        return self.sampling_s >= 4 * cfg.budget_s and self.rounds >= 3

    def round_s(self) -> float:
        """Seconds one round has taken so far (a first guess before any round)."""
        if self.rounds:
            return self.sampling_s / self.rounds
        return sum((n + self.warm_call(i)) * single for i, (n, single) in enumerate(zip(self.numbers, self.single_s)))

    def stats(self) -> list[LatencyStats]:
        """Per inference; ``number`` counts the inferences averaged into each sample."""
        return [summarize(s, n * requests) for s, n, requests in zip(self.samples, self.numbers, self.requests)]


def time_alternating(candidates: Sequence[Timed], config: TimingConfig) -> list[LatencyStats]:
    """The whole timing loop in one go (see AlternatingSampler)."""
    sampler = AlternatingSampler(candidates, config)
    while not sampler.done():
        sampler.take_rounds(1)
    return sampler.stats()
