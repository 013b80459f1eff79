"""The TVM tuning plan without TVM: search settings sized to the budget, the latency
estimate behind the tuning curve."""
from types import SimpleNamespace

import pytest

from adapters.tvm_tuning import SearchSettings, TuningBudget, estimated_latency_ms, round_best_ms


@pytest.mark.parametrize("trials, tasks, per_round", [(4, 1, 8), (16, 1, 8), (64, 1, 32), (64, 3, 8),
                                                        (256, 3, 32), (256, 14, 8), (2000, 1, 32)])
def test_rounds_are_sized_to_the_budget(trials, tasks, per_round):
    settings = SearchSettings.for_budget(TuningBudget(trials=trials), tasks)
    assert settings.trials_per_round == per_round
    assert settings.population >= 4 * per_round  # the search scales with the round, not TVM's 512
    assert 32 <= settings.cost_model_warmup_samples <= 100
    assert settings.cost_model_warmup_samples <= max(32, trials // 4)  # the model leaves its random phase


def test_the_estimate_waits_for_every_task_then_sums_calls_times_best():
    assert estimated_latency_ms([1.0, 2.0], [0.5, None], tried=1) is None
    assert estimated_latency_ms([1.0, 2.0], [0.5, 0.25], tried=2) == pytest.approx(1.0)
    # a task whose every candidate failed is left out rather than blanking the curve
    assert estimated_latency_ms([1.0, 2.0, 3.0], [0.5, 0.25, None], tried=3) == pytest.approx(1.0)


def test_a_round_best_skips_failed_candidates():
    ok = SimpleNamespace(error_msg=None, run_secs=[0.002, 0.004])
    failed = SimpleNamespace(error_msg="LocalRunner: timeout", run_secs=None)
    huge = SimpleNamespace(error_msg=None, run_secs=[1e6])  # how MetaSchedule marks a failed run
    assert round_best_ms([failed, ok, huge]) == pytest.approx(3.0)
    assert round_best_ms([failed]) is None
