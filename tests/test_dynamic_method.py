"""The dynamic-shape experiment's definitions, on a fake backend whose costs are known."""
import time

import pytest

from adapters.base import Backend, CompileContext, CompileResult, DelegatingSession
from adapters.eager import TorchCompiled
from compare.experiments import dynamic
from compare.results.protocol import DynamicSpec
from conftest import FIXTURES, tiny_spec
from workloads import resolve_workloads

pytestmark = pytest.mark.unit

COMPILE_S = 0.15  # what one compile costs the fake backend


class FakeBackend(Backend):
    """Compiles in a fixed time; ``symbolic`` compiles once and serves every size."""

    name = "fake"

    def compile(self, module, example_inputs, ctx):
        time.sleep(COMPILE_S)
        return CompileResult(TorchCompiled(module, "cpu"))

    def dynamic_session(self, module, example_inputs, dynamic_dims, strategy, ctx):
        if strategy == "symbolic":
            return DelegatingSession(self, self.compile(module, example_inputs, ctx).compiled)
        return super().dynamic_session(module, example_inputs, dynamic_dims, strategy, ctx)


def _spec(strategy, plan, tmp_path):
    dynamic_spec = DynamicSpec(strategy, plan, steady_calls=5)
    return tiny_spec("fake", tmp_path, threads=1, dynamic=dynamic_spec, timing={"budget_s": 0.6, "min_samples": 5})


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    (workload,) = resolve_workloads(["tiny_linear"], [FIXTURES / "tiny_workloads.py"])
    plan = dynamic.shape_plan(workload, "small", distinct=3, calls=9, seed=0)
    out = []
    for strategy in dynamic.STRATEGIES:
        work_dir = tmp_path_factory.mktemp(strategy)
        ctx = CompileContext(workload_name="tiny_linear", workload_key="k", device="cpu", threads=1, work_dir=work_dir)
        spec = _spec(strategy, plan, work_dir)
        assert spec.dynamic is not None and not spec.count_work
        out.append(dynamic.measure(spec, spec.dynamic, ctx, FakeBackend(), lambda **_: None))
    return plan, out


def test_the_plan_warms_on_a_size_outside_the_measured_ones():
    (workload,) = resolve_workloads(["tiny_linear"], [FIXTURES / "tiny_workloads.py"])
    plan = dynamic.shape_plan(workload, "small", distinct=3, calls=9, seed=0)
    assert plan["warmup_value"] not in plan["values"] and len(plan["values"]) == 3
    assert plan["base"] in plan["values"]


def test_transition_cost_is_measured_beyond_a_steady_call(records):
    plan, (specialize, symbolic, _) = records
    assert specialize["transition_count"] == symbolic["transition_count"] == 3
    # Every transition under specialize pays one compile; the warm-up paid its own.
    assert specialize["transition_cost_s"] == pytest.approx(COMPILE_S, abs=0.05)
    assert specialize["warmup_s"] >= COMPILE_S
    # Symbolic paid its one compile in the warm-up, so its transitions cost about nothing.
    assert symbolic["warmup_s"] >= COMPILE_S and symbolic["transition_cost_s"] < 0.02
    assert specialize["compiles"] == 4 and symbolic["compiles"] == 1
    assert specialize["numerics_ok"] and symbolic["numerics_ok"]


def test_the_reduction_is_not_capped_by_the_first_compile(records):
    plan, recs = records
    (row,) = dynamic.summarize_records(recs)
    # Counting the first compile under both strategies capped this at 1 - 1/K (67 % for K = 3).
    assert row["transition_reduction"] > 0.9
    assert row["transitions"] == 3


def test_steady_state_slowdown_is_timed_alternately_with_an_interval(records):
    plan, (_, _, steady) = records
    assert steady["status"] == "ok" and len(steady["per_value"]) == 3
    lo, hi = steady["slowdown_ci"]
    assert lo <= steady["slowdown"] <= hi
    # the same eager code behind both strategies: no real slowdown
    assert abs(steady["slowdown"]) < 0.25
    assert all(v["pairs"] >= 5 for v in steady["per_value"])
