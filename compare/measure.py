"""Measurement: timing with statistics, numerical agreement, break-even.

Timing follows torch.utils.benchmark / pyperf practice: warm up, calibrate a
number of calls per sample so the clock's resolution and the loop's overhead
vanish, then take samples until the median is known precisely enough or the
time budget ends. The reference and the candidate are sampled alternately
(ABBA order) so machine drift cancels out of their ratio.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .results import LatencyStats

# A cell is flagged noisy when its interquartile range exceeds this share of the median.
NOISY_REL_IQR = 0.10


@dataclass
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
    """Call until ``warmup_s`` has passed (at least twice); return the last call's seconds."""
    deadline = time.perf_counter() + warmup_s
    calls = 0
    last = 0.0
    while calls < 2 or time.perf_counter() < deadline:
        last = sample_once(run, arg, 1, sync)
        calls += 1
    return last


def calibrate(single_call_s: float, min_sample_s: float) -> int:
    return max(1, math.ceil(min_sample_s / max(single_call_s, 1e-9)))


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


@dataclass
class Timed:
    run: Callable[[Any], Any]
    arg: Any
    sync: Callable[[], None]


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
        self.numbers = [calibrate(single, config.min_sample_s) for single in self.single_s]
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
                                                   warm=self.config.sample_warmup))
            self.rounds += 1
        self.sampling_s += time.perf_counter() - start

    def precise(self) -> bool:
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
        extra = 1 if self.config.sample_warmup else 0
        return sum((n + extra) * single for n, single in zip(self.numbers, self.single_s))

    def stats(self) -> list[LatencyStats]:
        return [summarize(s, n) for s, n in zip(self.samples, self.numbers)]


def time_alternating(candidates: Sequence[Timed], config: TimingConfig) -> list[LatencyStats]:
    """The whole timing loop in one go (see AlternatingSampler)."""
    sampler = AlternatingSampler(candidates, config)
    while not sampler.done():
        sampler.take_rounds(1)
    return sampler.stats()


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


# ----------------------------------------------------------------------------- numerics

# (rtol, atol) per output dtype for "agrees with eager": loose enough for a
# different summation order, tight enough to catch a wrong kernel.
TOLERANCES = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-4),
    "bfloat16": (1.6e-2, 1e-2),
    "float16": (1e-2, 1e-3),
}


# --dtype names -> torch dtypes, and each one's unit roundoff (machine epsilon).
DTYPE_NAMES = ("fp32", "bf16", "fp16")
DTYPE_EPS = {"fp32": 2.0**-23, "bf16": 2.0**-7, "fp16": 2.0**-10}
# Reduced precision: a backend passes when its error against float64 is at most this
# many times eager's own error at the same precision (plus one ulp of the output's
# scale). Fixed tolerances do not scale with depth: a 12-layer bf16 model legitimately
# drifts by far more than a single op.
REDUCED_PRECISION_FACTOR = 4.0


def torch_dtype(name: str):
    """The torch dtype for a --dtype name (torch is imported only when asked)."""
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def reduced_precision_verdict(vs_fp64: dict[str, Any], eager_vs_fp64: dict[str, Any], dtype: str,
                              output_scale: float) -> dict[str, Any]:
    """ok / error / tolerance for one draw of a bf16 or fp16 cell, judged against float64."""
    eager_err = eager_vs_fp64.get("max_abs")
    err = vs_fp64.get("max_abs")
    floor = DTYPE_EPS[dtype] * output_scale
    limit = REDUCED_PRECISION_FACTOR * (eager_err if eager_err is not None and math.isfinite(eager_err) else 0.0) + floor
    tolerance = {"max_abs_vs_fp64": limit, "factor_of_eager_error": REDUCED_PRECISION_FACTOR, "floor": floor}
    if err is None or not math.isfinite(err):
        return {"ok": False, "error": vs_fp64.get("error") or "non-finite output", "tolerance": tolerance}
    if err > limit:
        return {"ok": False, "tolerance": tolerance,
                "error": f"{dtype} error vs float64 {err:.3g} exceeds {REDUCED_PRECISION_FACTOR:g}x eager's own "
                         f"{eager_err:.3g} + {floor:.3g}"}
    return {"ok": True, "error": None, "tolerance": tolerance}


def fp32_verdict(vs_eager: dict[str, Any], vs_fp64: dict[str, Any], eager_vs_fp64: dict[str, Any]) -> dict[str, Any]:
    """One draw of an fp32 cell: it agrees with eager within tolerance, or it is at least as
    close to float64 as eager is (a more accurate backend never fails for disagreeing)."""
    if vs_eager.get("ok"):
        return {"ok": True, "error": None, "tolerance": vs_eager.get("tolerance")}
    err, eager_err = vs_fp64.get("max_abs"), eager_vs_fp64.get("max_abs")
    closer = (vs_fp64.get("error") is None and err is not None and eager_err is not None
              and math.isfinite(err) and err <= eager_err)
    if closer:
        return {"ok": True, "error": None, "tolerance": vs_eager.get("tolerance"),
                "note": f"beyond eager's tolerance, but closer to float64 ({err:.3g}) than eager ({eager_err:.3g})"}
    return {"ok": False, "error": vs_eager.get("error"), "tolerance": vs_eager.get("tolerance")}


def numerics_verdict(dtype: str, checks: dict[str, dict[str, Any]], output_scale: float) -> dict[str, Any]:
    """The verdict on one input draw, from its three comparisons (vs_eager, vs_fp64,
    eager_vs_fp64): each draw is judged with its own eager error, never the worst of another."""
    if dtype == "fp32":
        return fp32_verdict(checks["vs_eager"], checks["vs_fp64"], checks["eager_vs_fp64"])
    return reduced_precision_verdict(checks["vs_fp64"], checks["eager_vs_fp64"], dtype, output_scale)


def merge_worst(worst: dict[str, Any], key: str, check: dict[str, Any]) -> None:
    """Keep the largest errors over draws; ok only if every draw was ok."""
    if key not in worst:
        worst[key] = dict(check)
        return
    acc = worst[key]
    for name in ("max_abs", "max_rel"):
        if check.get(name) is not None:
            acc[name] = max(acc.get(name) or 0.0, check[name])
    if not check.get("ok", False):
        if acc.get("ok", False):
            acc["error"] = check.get("error")
        acc["ok"] = False


def tolerance_for(dtype_name: str) -> tuple[float, float]:
    return TOLERANCES.get(dtype_name, (0.0, 0.0))


def compare_outputs(candidate: Sequence[Any], reference: Sequence[Any]) -> dict[str, Any]:
    """Max abs / max rel error of ``candidate`` against ``reference`` (lists of tensors).

    Relative error uses ``max(|ref|, atol)`` as the denominator so references
    near zero (which make plain relative error explode, as the survey notes)
    do not dominate. NaN or inf where the reference is finite never passes.
    """
    import torch

    if len(candidate) != len(reference):
        return {"ok": False, "error": f"{len(candidate)} outputs, reference has {len(reference)}"}
    max_abs = 0.0
    max_rel = 0.0
    ok = True
    error = None
    tol = None
    for i, (c, r) in enumerate(zip(candidate, reference)):
        c = torch.as_tensor(c).detach().cpu()
        r = torch.as_tensor(r).detach().cpu()
        if tuple(c.shape) != tuple(r.shape):
            return {"ok": False, "error": f"output {i} has shape {tuple(c.shape)}, reference {tuple(r.shape)}"}
        dtype_name = str(r.dtype).replace("torch.", "")
        rtol, atol = tolerance_for(dtype_name if r.is_floating_point() else "int")
        tol = {"rtol": rtol, "atol": atol}
        c64 = c.to(torch.float64)
        r64 = r.to(torch.float64)
        finite_ref = torch.isfinite(r64)
        bad = finite_ref & ~torch.isfinite(c64)
        if bool(bad.any()):
            ok = False
            error = f"output {i} has {int(bad.sum())} non-finite value(s) where the reference is finite"
        if not bool(finite_ref.all()) and error is None:
            error = f"reference output {i} itself has non-finite values"
            ok = False
        diff = (c64 - r64).abs()
        diff = torch.where(finite_ref & torch.isfinite(c64), diff, torch.full_like(diff, math.inf))
        if diff.numel():
            max_abs = max(max_abs, float(diff.max()))
            rel = diff / torch.clamp(r64.abs(), min=max(atol, 1e-12))
            max_rel = max(max_rel, float(rel.max()))
            if bool((diff > atol + rtol * r64.abs()).any()):
                ok = False
                if error is None:
                    worst = int(diff.argmax())
                    error = (
                        f"output {i} differs beyond rtol={rtol:g} atol={atol:g}: "
                        f"max abs {float(diff.max()):.3g} at flat index {worst}"
                    )
    return {"ok": ok, "error": error, "max_abs": max_abs, "max_rel": max_rel, "tolerance": tol}


def break_even_calls(compile_s: float | None, eager_ms: float | None, compiled_ms: float | None) -> float | None:
    """Calls after which compile time is paid back: compile_s / (eager - compiled).
    None ("never") when the compiled code is not faster."""
    if compile_s is None or eager_ms is None or compiled_ms is None:
        return None
    saved_s = (eager_ms - compiled_ms) / 1e3
    if saved_s <= 0:
        return None
    return compile_s / saved_s
