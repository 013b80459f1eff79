"""The resume policy, without running anything: what is kept, what runs again, and
when a resume is refused."""
import dataclasses

import pytest

from compare.harness.resume import ResumeRefused, plan_resume
from compare.harness.runner import RunConfig, Runner
from compare.results.schema import Cell, RunResults

pytestmark = pytest.mark.unit

ENV = {"cpu_model": "EPYC", "cores": 2, "versions": {"torch": "2.13.0"}}


def _stored():
    cells = [Cell("mlp", "eager", "ok"), Cell("mlp", "ort", "timeout", transient=True),
             Cell("mlp", "tvm", "failed", error="compiler bug"),
             Cell("mlp", "iree", "failed", error="worker killed by node loss: x", transient=True)]
    return RunResults(environment=dict(ENV), config={}, cells=cells)


def _config(**changes):
    return dataclasses.replace(RunConfig(backends=["eager", "ort", "tvm", "iree"], workloads=["mlp"]), **changes)


def test_transient_cells_run_again_and_the_rest_are_kept():
    plan = plan_resume(_stored(), _config(), _config(), explicit=set(), now=dict(ENV))
    assert [c.backend for c in plan.results.cells] == ["eager", "tvm"] and plan.rerun == 2
    assert plan.results.state == "running"


def test_an_option_that_changes_the_measurement_refuses_and_one_that_does_not_applies():
    with pytest.raises(ResumeRefused, match="--threads was 1 in that run, now 4"):
        plan_resume(_stored(), _config(), _config(threads=4), explicit={"--threads"}, now=dict(ENV))
    plan = plan_resume(_stored(), _config(), _config(timeout_s=60.0), explicit={"--timeout"}, now=dict(ENV))
    assert plan.config.timeout_s == 60.0
    # a flag left at its default is not a change
    assert plan_resume(_stored(), _config(), _config(threads=4), explicit=set(), now=dict(ENV)).config.threads == 1


@pytest.mark.parametrize("now, message", [({**ENV, "cores": 4}, "cores was 2"),
                                           ({**ENV, "versions": {"torch": "2.14.0"}}, "torch was 2.13.0")])
def test_another_machine_or_package_refuses(now, message):
    with pytest.raises(ResumeRefused, match=message):
        plan_resume(_stored(), _config(), _config(), explicit=set(), now=now)


def test_the_plan_covers_every_workload_backend_batch_and_dtype():
    config = _config(backends=["eager", "ort"], workloads=["mlp", "conv"], batches=[1, 8], dtypes=["fp32", "bf16"])
    plan = Runner(config).plan()
    assert len(plan) == 2 * 2 * 2 * 2 and plan[0] == ("mlp", "eager", 1, "fp32") and plan[1] == ("mlp", "ort", 1, "fp32")
