"""The TVM tuning plan without TVM: search settings sized to the budget, the latency
estimate behind the tuning curve."""
from types import SimpleNamespace

import pytest

from adapters.tvm.tuning import SearchSettings, TuningBudget, budget_spent, estimated_latency_ms, fixed_space_size, round_best_ms

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("trials, tasks, per_round", [(4, 1, 8), (16, 1, 8), (64, 1, 32), (64, 3, 8),
                                                        (256, 3, 32), (256, 14, 8), (2000, 1, 32)])
def test_rounds_are_sized_to_the_budget(trials, tasks, per_round):
    settings = SearchSettings.for_budget(TuningBudget(trials=trials), tasks)
    assert settings.trials_per_round == per_round
    assert settings.population >= 4 * per_round  # the search scales with the round, not TVM's 512
    assert 32 <= settings.cost_model_warmup_samples <= 100
    assert settings.cost_model_warmup_samples <= max(32, trials // 4)  # the model leaves its random phase


def test_every_task_gets_the_floor_of_trials_within_the_time_budget():
    # ResNet-18's 18 tasks: 256 trials would be 14 each, below the tutorial's 16
    assert TuningBudget.planned(256, 18, 16, minutes=5).trials == 288
    assert TuningBudget.planned(256, 18, 16, minutes=5).minutes == 5  # the time budget still binds
    assert TuningBudget.planned(256, 3, 16).trials == 256  # the survey graphs: the floor is below the budget


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


def test_the_time_budget_ends_at_the_round_end_nearest_the_deadline():
    rounds = [0.0, 10.0, 20.0, 30.0]  # 10 s rounds so far
    assert not budget_spent(now=30.0, deadline=40.0, round_ends=rounds)  # the next round ends on time
    assert not budget_spent(now=30.0, deadline=35.1, round_ends=rounds)  # ... or less than half a round late
    assert budget_spent(now=30.0, deadline=34.9, round_ends=rounds)  # more than half a round late: stop now
    assert budget_spent(now=41.0, deadline=40.0, round_ends=[0.0])  # past it, whatever the rounds
    assert not budget_spent(now=39.0, deadline=40.0, round_ends=[0.0])


def _space(*decision_counts):
    schedules = [SimpleNamespace(trace=SimpleNamespace(decisions=dict.fromkeys(range(n)))) for n in decision_counts]
    return SimpleNamespace(generate_design_space=lambda: schedules)


def test_a_space_without_random_decisions_has_a_known_size():
    assert fixed_space_size(_space(0)) == 1  # the pointwise chain: one program, nothing to search
    assert fixed_space_size(_space(0, 0)) == 2
    assert fixed_space_size(_space(0, 3)) is None  # sampled: its size is open
