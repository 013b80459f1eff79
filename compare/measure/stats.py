"""Statistics on timing samples: medians, paired bootstrap intervals, break-even."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from compare.results.schema import LatencyStats

# A cell is flagged noisy when its interquartile range exceeds this share of the median.
NOISY_REL_IQR = 0.10


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


def paired_bootstrap_medians(ref: Sequence[float], cand: Sequence[float], groups: Sequence[int] | None = None,
                             resamples: int = 2000, seed: int = 0):
    """Medians of bootstrap resamples of alternated pairs: sample i of ``ref`` and sample i
    of ``cand`` were taken in the same round, so they are drawn together (what drifted
    during that round stays in the pair). ``groups`` are the pair counts of each worker
    process, in order; pairs are resampled within each process and pooled, so every
    process keeps its weight (pyperf's repeats across processes)."""
    ref_arr, cand_arr = np.asarray(ref, dtype=float), np.asarray(cand, dtype=float)
    if len(ref_arr) != len(cand_arr):
        raise ValueError(f"paired samples differ in length: {len(ref_arr)} and {len(cand_arr)}")
    groups = list(groups) if groups else [len(ref_arr)]
    if sum(groups) != len(ref_arr):
        raise ValueError(f"process sample counts {groups} do not add up to {len(ref_arr)} pairs")
    rng = np.random.default_rng(seed)
    picks, offset = [], 0
    for count in groups:
        picks.append(offset + rng.integers(0, count, size=(resamples, count)))
        offset += count
    index = np.concatenate(picks, axis=1)
    return np.median(ref_arr[index], axis=1), np.median(cand_arr[index], axis=1)


def speedup_interval(ref: LatencyStats, cand: LatencyStats, groups: Sequence[int] | None = None) -> list[float]:
    """Paired-bootstrap 95% interval of median(ref) / median(cand)."""
    if len(ref.samples) < 2 or len(ref.samples) != len(cand.samples):
        return [ref.median / cand.median] * 2
    ra, rb = paired_bootstrap_medians(ref.samples, cand.samples, groups)
    lo, hi = np.percentile(ra / rb, [2.5, 97.5])
    return [float(lo), float(hi)]


def break_even_interval(paid_s: float | None, ref: LatencyStats, cand: LatencyStats,
                        groups: Sequence[int] | None = None) -> list[float] | None:
    """95% interval of the break-even call count from the same paired resamples as the
    speedup. None ("never") when the speedup's interval reaches down to 1: then the
    backend may not be faster at all, and no finite call count can be promised."""
    if paid_s is None or len(ref.samples) < 2 or len(ref.samples) != len(cand.samples):
        return None
    ra, rb = paired_bootstrap_medians(ref.samples, cand.samples, groups)
    if np.percentile(ra / rb, 2.5) <= 1.0:
        return None
    calls = paid_s / ((ra - rb) / 1e3)
    lo, hi = np.percentile(calls, [2.5, 97.5])
    return [float(lo), float(hi)]


def break_even_calls(compile_s: float | None, eager_ms: float | None, compiled_ms: float | None) -> float | None:
    """Calls after which compile time is paid back: compile_s / (eager - compiled).
    None ("never") when the compiled code is not faster."""
    if compile_s is None or eager_ms is None or compiled_ms is None:
        return None
    saved_s = (eager_ms - compiled_ms) / 1e3
    if saved_s <= 0:
        return None
    return compile_s / saved_s
