import math
import time

import pytest
import torch

from compare.measure.numerics import compare_outputs
from compare.measure.stats import break_even_calls, median_rel_se, speedup_interval, summarize
from compare.measure.timing import Timed, TimingConfig, time_alternating

pytestmark = pytest.mark.unit


def test_break_even_arithmetic():
    # 10 s of compile, 2 ms saved per call -> 5000 calls
    assert break_even_calls(10.0, 5.0, 3.0) == pytest.approx(5000.0)
    # compiled slower or equal: never
    assert break_even_calls(10.0, 3.0, 5.0) is None
    assert break_even_calls(10.0, 3.0, 3.0) is None
    assert break_even_calls(None, 3.0, 1.0) is None


def test_summarize_percentiles_in_ms():
    stats = summarize([0.001 * i for i in range(1, 102)], number=3)
    assert stats.median == pytest.approx(51.0)
    assert stats.p10 == pytest.approx(11.0)
    assert stats.p90 == pytest.approx(91.0)
    assert stats.n == 101 and stats.number == 3
    assert stats.iqr == pytest.approx(50.0)


def test_median_precision_shrinks_with_samples():
    import numpy as np

    rng = np.random.default_rng(0)
    few = rng.normal(1.0, 0.05, 10)
    many = rng.normal(1.0, 0.05, 1000)
    assert median_rel_se(many) < median_rel_se(few)
    assert median_rel_se([1.0, 2.0]) == math.inf


def test_time_alternating_orders_two_callables_correctly():
    def sleeper(seconds):
        return lambda _: time.sleep(seconds)

    noop = lambda: None  # noqa: E731
    cfg = TimingConfig(warmup_s=0.01, min_sample_s=0.002, min_samples=5, budget_s=0.5)
    fast, slow = time_alternating([Timed(sleeper(0.001), None, noop), Timed(sleeper(0.004), None, noop)], cfg)
    assert fast.n == slow.n >= 5
    assert slow.median > 2 * fast.median
    assert fast.median >= 1.0  # ms: sleep never returns early
    lo, hi = speedup_interval(slow, fast)
    assert lo <= slow.median / fast.median <= hi


def test_compare_outputs_tolerance_nan_and_shape():
    ref = [torch.ones(4, 4)]
    ok = compare_outputs([torch.ones(4, 4) + 1e-6], ref)
    assert ok["ok"] and ok["max_abs"] == pytest.approx(1e-6, rel=0.1)
    wrong = compare_outputs([torch.ones(4, 4) * 1.01], ref)
    assert not wrong["ok"] and "beyond" in wrong["error"]
    nan = torch.ones(4, 4)
    nan[1, 1] = float("nan")
    bad = compare_outputs([nan], ref)
    assert not bad["ok"] and "non-finite" in bad["error"]
    shape = compare_outputs([torch.ones(2, 8)], ref)
    assert not shape["ok"] and "shape" in shape["error"]
    count = compare_outputs([torch.ones(4, 4), torch.ones(1)], ref)
    assert not count["ok"]


def test_relative_error_is_not_blown_up_by_zeros():
    ref = [torch.tensor([0.0, 1.0])]
    res = compare_outputs([torch.tensor([1e-6, 1.0])], ref)
    # denominator floored at atol (1e-4): 1e-6 / 1e-4 = 1e-2, not infinity
    assert res["max_rel"] == pytest.approx(1e-2, rel=1e-3)
    assert res["ok"]


def test_one_precision_table_names_every_precision_once():
    from compare.measure.numerics import DTYPE_NAMES, PRECISIONS, QUANTIZED_DTYPES, WEIGHT_ONLY, tolerance_for, torch_dtype

    for name in DTYPE_NAMES:
        # int8 and the weight-only kinds: fp32 tensors until each backend's quantizer (its own tolerance)
        if name in QUANTIZED_DTYPES or name in WEIGHT_ONLY:
            assert torch_dtype(name) == torch.float32 and name not in PRECISIONS
            continue
        precision = PRECISIONS[name]
        assert torch_dtype(name) == getattr(torch, precision.element_type)
        if name == "tf32":  # a math mode on fp32 tensors: a 10-bit mantissa, fp32's output tolerance
            assert precision.eps == 2.0**-10 and tolerance_for("float32") == PRECISIONS["fp32"].tolerance
            continue
        assert torch.finfo(torch_dtype(name)).eps == precision.eps
        assert tolerance_for(str(torch_dtype(name)).removeprefix("torch.")) == precision.tolerance
    assert tolerance_for("int64") == (0.0, 0.0)


def test_samples_of_a_round_last_as_long_as_its_slowest_call():
    from compare.measure.timing import AlternatingSampler, sample_seconds

    config = TimingConfig(min_sample_s=0.01, max_sample_s=0.5)
    assert sample_seconds([0.009, 1.5], config) == 0.5  # eager beside a 1.5 s backend: half a second of eager
    assert sample_seconds([0.009, 0.04], config) == 0.04
    assert sample_seconds([0.001, 0.002], config) == 0.01  # fast pairs keep the floor
    assert sample_seconds([0.009, 1.5], TimingConfig(balance_samples=False)) == 0.01

    def sleeper(seconds):
        return Timed(lambda _: time.sleep(seconds), None, lambda: None)

    sampler = AlternatingSampler([sleeper(0.001), sleeper(0.03)], TimingConfig(warmup_s=0.0, min_sample_s=0.005))
    fast, slow = sampler.numbers
    assert slow == 1 and fast >= 10  # the fast one's sample spans about one slow call, not 5 ms


def test_a_call_slower_than_the_warm_up_and_the_sample_takes_no_extra_untimed_calls(monkeypatch):
    """A 1 s call (on a fake clock): warm-up is that one call, and its samples get no untimed
    call before them; a 1 ms call keeps both (two warm-up calls at least, one untimed call
    per sample)."""
    from compare.measure import timing

    clock = [0.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    calls = {"slow": 0, "fast": 0}

    def runner(name, seconds):
        def run(_):
            calls[name] += 1
            clock[0] += seconds
        return run

    config = TimingConfig(warmup_s=0.2, min_samples=1, max_samples=3, budget_s=0.0, max_sample_s=0.5)
    sampler = timing.AlternatingSampler([Timed(runner("slow", 1.0), None, lambda: None),
                                         Timed(runner("fast", 0.001), None, lambda: None)], config)
    assert calls["slow"] == 1 and calls["fast"] >= 200  # the fast one warms for 0.2 s
    assert [sampler.warm_call(0), sampler.warm_call(1)] == [False, True]
    before = dict(calls)
    sampler.take_rounds(1)
    assert calls["slow"] - before["slow"] == 1  # one timed call, nothing untimed
    assert calls["fast"] - before["fast"] == 1 + sampler.numbers[1]  # one untimed call, then the sample's


def test_the_stopping_rule_ends_on_precision_or_on_the_budget():
    # A steady callable is known precisely after min_samples rounds and stops long before its
    # budget; a noisy one never gets that precise and stops when its budget is spent.
    import random

    from compare.measure.timing import AlternatingSampler

    def spin(seconds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    noop = lambda: None  # noqa: E731
    cfg = TimingConfig(warmup_s=0.0, min_sample_s=0.001, min_samples=5, budget_s=0.3, target_rel_se=0.02,
                       sample_warmup=False)
    steady = AlternatingSampler([Timed(lambda _: spin(0.002), None, noop)], cfg)
    noisy = AlternatingSampler([Timed(lambda _: spin(random.uniform(0.0005, 0.005)), None, noop)], cfg)
    for sampler in (steady, noisy):
        while not sampler.done():
            sampler.take_rounds(1)
    assert steady.precise() and steady.rounds < 20 and steady.sampling_s < cfg.budget_s
    assert not noisy.precise() and noisy.sampling_s >= cfg.budget_s and noisy.rounds > cfg.min_samples
