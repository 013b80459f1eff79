"""Statistics on timing samples: medians, paired bootstrap intervals, break-even."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from compare.measure.latency import LatencyStats

# A cell is flagged noisy when its interquartile range exceeds this share of the median.
NOISY_REL_IQR = 0.10


# The per-request percentiles of the single-stream scenario, as MLPerf LoadGen reports them.
REQUEST_PERCENTILES = (50.0, 90.0, 99.0, 99.9)


def request_percentiles(samples_ms: Sequence[float]) -> dict[str, float | int | None]:
    """p50/p90/p99/p99.9 of per-request latencies (ms), their max and count. Each is an
    observed request (the smallest with at least q % of requests at or below it), as a
    latency SLO reads it, not an interpolation. A percentile needs at least 1/(1-q)
    requests (p99: 100, p99.9: 1000) to be more than the largest one seen: with fewer it is
    None, not a guess."""
    ms = np.sort(np.asarray(samples_ms, dtype=float))
    out: dict[str, float | int | None] = {"n": int(ms.size), "max": float(ms[-1]) if ms.size else None}
    for q in REQUEST_PERCENTILES:
        enough = ms.size >= round(1 / (1 - q / 100))
        out[f"p{q:g}"] = float(ms[observed_rank(q, ms.size)]) if enough else None
    return out


def observed_rank(q: float, count: int) -> int:
    """Index, in ``count`` sorted requests, of the smallest with at least q % at or below it."""
    rank = math.ceil(round(q / 100 * count, 9))  # rounded: 0.999 x 1000 is 999, not 999.0000001
    return max(rank, 1) - 1


def geometric_mean(values: Sequence[float]) -> float | None:
    """The geometric mean of positive ratios (None for none): the mean of speedups, as
    slowdowns and speedups count alike."""
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summarize(samples_s: Sequence[float], number: int) -> LatencyStats:
    return LatencyStats.from_ms([x * 1e3 for x in samples_s], number)


def median_rel_se(samples: Sequence[float]) -> float:
    """Standard error of the median relative to it, from the IQR (robust to outliers).
    se(median) ~ 1.2533 * sigma / sqrt(n), sigma ~ IQR / 1.349."""
    if len(samples) < 4:
        return math.inf
    arr = np.asarray(samples)
    q1, med, q3 = np.percentile(arr, [25, 50, 75])
    if med <= 0:
        return math.inf
    return 1.2533 * ((q3 - q1) / 1.349) / math.sqrt(arr.size) / med


def bootstrap_medians(a: Sequence[float], b: Sequence[float], resamples: int = 2000, seed: int = 0):
    """Medians of ``resamples`` bootstrap resamples of ``a`` and then of ``b`` (seeded),
    drawn independently: for two runs' samples, which are not paired."""
    rng = np.random.default_rng(seed)
    ra = np.median(rng.choice(np.asarray(a, dtype=float), size=(resamples, len(a))), axis=1)
    rb = np.median(rng.choice(np.asarray(b, dtype=float), size=(resamples, len(b))), axis=1)
    return ra, rb


def _paired(ref: Sequence[float], cand: Sequence[float], groups: Sequence[int] | None):
    """Both sample lists as arrays, and the pair counts per process (checked)."""
    ref_arr, cand_arr = np.asarray(ref, dtype=float), np.asarray(cand, dtype=float)
    if len(ref_arr) != len(cand_arr):
        raise ValueError(f"paired samples differ in length: {len(ref_arr)} and {len(cand_arr)}")
    groups = [int(g) for g in groups] if groups else [len(ref_arr)]
    if sum(groups) != len(ref_arr) or min(groups) < 1:
        raise ValueError(f"process sample counts {groups} do not add up to {len(ref_arr)} pairs")
    return ref_arr, cand_arr, groups


def paired_bootstrap_medians(ref: Sequence[float], cand: Sequence[float], groups: Sequence[int] | None = None,
                             resamples: int = 2000, seed: int = 0):
    """Medians of bootstrap resamples of alternated pairs: sample i of ``ref`` and sample i
    of ``cand`` were taken in the same round, so they are drawn together (what drifted
    during that round stays in the pair). ``groups`` are the pair counts of each worker
    process, in order; pairs are resampled within each process and pooled, so every
    process keeps its weight (pyperf's repeats across processes)."""
    ref_arr, cand_arr, groups = _paired(ref, cand, groups)
    rng = np.random.default_rng(seed)
    picks, offset = [], 0
    for count in groups:
        picks.append(offset + rng.integers(0, count, size=(resamples, count)))
        offset += count
    index = np.concatenate(picks, axis=1)
    return np.median(ref_arr[index], axis=1), np.median(cand_arr[index], axis=1)


# Each tail of the 95 % interval.
INTERVAL_TAIL = 0.025


def block_indices(rng, count: int, block: int, resamples: int) -> np.ndarray:
    """Circular moving-block bootstrap of ``count`` consecutive rounds: each resample is
    made of blocks of ``block`` consecutive rounds, so what drifted over a block stays in it."""
    block = max(1, min(int(block), count))
    starts = rng.integers(0, count, size=(resamples, -(-count // block)))
    index = (starts[:, :, None] + np.arange(block)[None, None, :]) % count
    return index.reshape(resamples, -1)[:, :count]


def observed_percentile(values: np.ndarray, q: float) -> np.ndarray:
    """The observed-request percentile of ``request_percentiles`` along the last axis."""
    return np.sort(values, axis=-1)[..., observed_rank(q, values.shape[-1])]


def hierarchical_resample_medians(ref: Sequence[float], cand: Sequence[float], groups: Sequence[int] | None = None,
                                  block: int = 1, resamples: int = 2000, seed: int = 0, statistic=None):
    """Medians (or ``statistic``, taken along the last axis) of ``ref`` and ``cand`` over
    hierarchical bootstrap resamples: the worker
    processes are resampled (with replacement), then blocks of consecutive rounds within
    each chosen process. Sample i of ``ref`` and of ``cand`` were taken in the same round,
    so they are drawn together. ``groups`` are the pair counts of each process, in order.
    One process's state (where its buffers landed) biases all its samples, so the
    processes, not the samples, are the independent units."""
    ref_arr, cand_arr, groups = _paired(ref, cand, groups)
    rng = np.random.default_rng(seed)
    offsets = np.cumsum([0, *groups[:-1]])
    within = [offset + block_indices(rng, count, block, resamples) for offset, count in zip(offsets, groups)]
    stat = statistic or (lambda values: np.median(values, axis=-1))
    if len(groups) == 1:
        index = within[0]
        return stat(ref_arr[index]), stat(cand_arr[index])
    chosen = rng.integers(0, len(groups), size=(resamples, len(groups)))
    ra, rb = np.empty(resamples), np.empty(resamples)
    for r in range(resamples):
        index = np.concatenate([within[p][r] for p in chosen[r]])
        ra[r], rb[r] = stat(ref_arr[index]), stat(cand_arr[index])
    return ra, rb


def stretch_resample_medians(ref: dict[str, list[list[float]]], cand: dict[str, list[list[float]]],
                             ref_block: int = 1, cand_block: int = 1, resamples: int = 2000, seed: int = 0):
    """Medians of ``ref`` and ``cand`` over bootstrap resamples that keep what was timed
    together: each maps a stretch of interleaved time to the sample lists of the processes
    that sampled in it. A resample draws stretches with replacement (a chosen stretch brings
    both sides' processes of that stretch, so the machine's slow swing stays in the pair),
    then blocks of consecutive rounds within each process, each side on its own (the two
    sides' samples are not paired round by round: they came from different processes)."""
    stretches = sorted(set(ref) & set(cand))
    if not stretches:
        raise ValueError("no stretch of time holds samples of both sides")
    rng = np.random.default_rng(seed)

    def within(groups, block):
        return {s: [(np.asarray(x, dtype=float), block_indices(rng, len(x), block, resamples)) for x in groups[s]]
                for s in stretches}
    ref_w, cand_w = within(ref, ref_block), within(cand, cand_block)
    chosen = rng.integers(0, len(stretches), size=(resamples, len(stretches)))
    ra, rb = np.empty(resamples), np.empty(resamples)
    for r in range(resamples):
        picked = [stretches[i] for i in chosen[r]] if len(stretches) > 1 else stretches
        ra[r] = np.median(np.concatenate([x[index[r]] for s in picked for x, index in ref_w[s]]))
        rb[r] = np.median(np.concatenate([x[index[r]] for s in picked for x, index in cand_w[s]]))
    return ra, rb


def interval_and_break_even(ra: np.ndarray, rb: np.ndarray, paid_s: float | None):
    """The 95 % percentile interval of ra / rb (resampled medians of the reference and the
    candidate, ms) and, from the same resamples, that of the break-even call count (None
    when the speedup's interval reaches 1: no finite count can be promised)."""
    quantiles = [100 * INTERVAL_TAIL, 100 * (1 - INTERVAL_TAIL)]
    speedup = [float(x) for x in np.percentile(ra / rb, quantiles)]
    if paid_s is None or speedup[0] <= 1.0:
        return speedup, None
    return speedup, [float(x) for x in np.percentile(paid_s / ((ra - rb) / 1e3), quantiles)]


def speedup_and_break_even(ref: LatencyStats, cand: LatencyStats, paid_s: float | None,
                           groups: Sequence[int] | None = None, block: int = 1):
    """The 95% interval of median(ref) / median(cand) (hierarchical bootstrap: processes,
    then blocks of ``block`` rounds; a plain percentile interval) and, from the
    same resamples, that of the break-even call count. The latter is None ("never") when
    the speedup's interval reaches down to 1: then the backend may not be faster at all,
    and no finite call count can be promised."""
    if len(ref.samples) < 2 or len(ref.samples) != len(cand.samples):
        return [ref.median / cand.median] * 2, None
    ra, rb = hierarchical_resample_medians(ref.samples, cand.samples, groups, block)
    # Not expanded for the few processes: resampling rounds within each process counts its
    # sampling noise a second time (Davison & Hinkley 1997, 3.8), which offsets the (K-1)/K
    # shortfall of the between-process part; `compare stability` measures the result.
    return interval_and_break_even(ra, rb, paid_s)


def tail_speedup(ref: LatencyStats, cand: LatencyStats, groups: Sequence[int] | None = None, block: int = 1,
                 q: float = 99.0) -> dict[str, Any] | None:
    """Eager's p``q`` request over the backend's and its 95% interval, resampled as the
    speedup's (processes, then blocks of rounds): how far the tail figure may move in the
    next run. None with fewer than 1/(1-q) requests, where the percentile is not observed."""
    if len(ref.samples) != len(cand.samples) or len(cand.samples) < round(1 / (1 - q / 100)):
        return None
    ra, rb = hierarchical_resample_medians(ref.samples, cand.samples, groups, block,
                                           statistic=lambda values: observed_percentile(values, q))
    ref_arr, cand_arr = np.asarray(ref.samples, dtype=float), np.asarray(cand.samples, dtype=float)
    ci = np.percentile(ra / rb, [100 * INTERVAL_TAIL, 100 * (1 - INTERVAL_TAIL)])
    ratio = observed_percentile(ref_arr, q) / observed_percentile(cand_arr, q)
    return {"q": q, "ratio": float(ratio), "ci": [float(x) for x in ci]}


def throughput_interval(stats: LatencyStats, groups: Sequence[int] | None = None, block: int = 1) -> list[float]:
    """95% interval of inferences per second, 1000 / the median of ms per inference, its
    samples resampled as the speedup's are (processes, then blocks of rounds)."""
    if len(stats.samples) < 2:
        return [1e3 / stats.median] * 2
    medians, _ = hierarchical_resample_medians(stats.samples, stats.samples, groups, block)
    low_ms, high_ms = np.percentile(medians, [100 * INTERVAL_TAIL, 100 * (1 - INTERVAL_TAIL)])
    return [float(1e3 / high_ms), float(1e3 / low_ms)]


def speedup_interval(ref: LatencyStats, cand: LatencyStats, groups: Sequence[int] | None = None,
                     block: int = 1) -> list[float]:
    """95% interval of median(ref) / median(cand) (see ``speedup_and_break_even``)."""
    return speedup_and_break_even(ref, cand, None, groups, block)[0]


def break_even_interval(paid_s: float | None, ref: LatencyStats, cand: LatencyStats,
                        groups: Sequence[int] | None = None, block: int = 1) -> list[float] | None:
    """95% interval of the break-even call count (see ``speedup_and_break_even``)."""
    if paid_s is None or len(ref.samples) < 2 or len(ref.samples) != len(cand.samples):
        return None
    return speedup_and_break_even(ref, cand, paid_s, groups, block)[1]


def block_rounds(correlation_s: float | None, round_s: float | None) -> int:
    """Rounds per bootstrap block: a block lasts at least the machine's correlation time
    (``compare noise``'s probe), so that resampled blocks are nearly independent."""
    if not correlation_s or not round_s or round_s <= 0:
        return 1
    return max(1, math.ceil(correlation_s / round_s))


def process_speedups(ref: LatencyStats, cand: LatencyStats, groups: Sequence[int] | None) -> list[float]:
    """Each process's own ratio of medians: the between-process spread shown beside the interval."""
    groups = list(groups) if groups else [len(ref.samples)]
    if sum(groups) != len(ref.samples) or len(ref.samples) != len(cand.samples):
        return []
    out, offset = [], 0
    for count in groups:
        a = np.median(ref.samples[offset:offset + count])
        b = np.median(cand.samples[offset:offset + count])
        out.append(float(a / b) if b > 0 else math.inf)
        offset += count
    return out


def break_even_calls(compile_s: float | None, eager_ms: float | None, compiled_ms: float | None) -> float | None:
    """Calls after which compile time is paid back: compile_s / (eager - compiled).
    None ("never") when the compiled code is not faster."""
    if compile_s is None or eager_ms is None or compiled_ms is None:
        return None
    saved_s = (eager_ms - compiled_ms) / 1e3
    if saved_s <= 0:
        return None
    return compile_s / saved_s
