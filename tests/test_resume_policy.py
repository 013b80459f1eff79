"""The resume policy, without running anything: what is kept, what runs again, and
when a resume is refused."""
import dataclasses

import pytest

from compare.cli import build_parser, resume_policy
from compare.harness.resume import ResumeRefused, plan_resume
from compare.harness.runner import RunConfig, Runner
from compare.results.schema import Cell, RunResults

pytestmark = pytest.mark.unit

POLICY = resume_policy(build_parser())
ENV = {"cpu_model": "EPYC", "cores": 2, "versions": {"torch": "2.13.0"}}


def _stored():
    cells = [Cell.from_flat("mlp", "eager", "ok"), Cell.from_flat("mlp", "ort", "timeout", transient=True),
             Cell.from_flat("mlp", "tvm", "failed", error="compiler bug"),
             Cell.from_flat("mlp", "iree", "failed", error="worker killed by node loss: x", transient=True)]
    return RunResults(environment=dict(ENV), config={}, cells=cells)


def _config(**changes):
    return dataclasses.replace(RunConfig(backends=["eager", "ort", "tvm", "iree"], workloads=["mlp"]), **changes)


def test_transient_cells_run_again_and_the_rest_are_kept():
    plan = plan_resume(_stored(), _config(), _config(), explicit=set(), now=dict(ENV), policy=POLICY)
    assert [c.backend for c in plan.results.cells] == ["eager", "tvm"] and plan.rerun == 2
    assert plan.results.state == "running"


def test_an_option_that_changes_the_measurement_refuses_and_one_that_does_not_applies():
    with pytest.raises(ResumeRefused, match="--threads was 1 in that run, now 4"):
        plan_resume(_stored(), _config(), _config(threads=4), explicit={"--threads"}, now=dict(ENV), policy=POLICY)
    plan = plan_resume(_stored(), _config(), _config(timeout_s=60.0), explicit={"--timeout"}, now=dict(ENV), policy=POLICY)
    assert plan.config.timeout_s == 60.0
    # a flag left at its default is not a change
    assert plan_resume(_stored(), _config(), _config(threads=4), explicit=set(), now=dict(ENV), policy=POLICY).config.threads == 1


@pytest.mark.parametrize("now, message", [({**ENV, "cores": 4}, "cores was 2"),
                                           ({**ENV, "versions": {"torch": "2.14.0"}}, "torch was 2.13.0")])
def test_another_machine_or_package_refuses(now, message):
    with pytest.raises(ResumeRefused, match=message):
        plan_resume(_stored(), _config(), _config(), explicit=set(), now=now, policy=POLICY)


def test_the_plan_covers_every_workload_backend_batch_and_dtype():
    config = _config(backends=["eager", "ort"], workloads=["mlp", "conv"], batches=[1, 8], dtypes=["fp32", "bf16"])
    plan = Runner(config).plan()
    assert len(plan) == 2 * 2 * 2 * 2 and plan[0] == ("mlp", "eager", 1, "fp32") and plan[1] == ("mlp", "ort", 1, "fp32")


def test_a_changed_backend_option_or_report_option_refuses_and_no_flag_is_ignored():
    stored_config = _config(options={"tvm_fast_math": "on"}, explain=False)
    with pytest.raises(ResumeRefused, match="^--tvm-fast-math was on in that run, now off;"):
        plan_resume(_stored(), stored_config, _config(options={"tvm_fast_math": "off"}),
                    explicit={"--tvm-fast-math"}, now=dict(ENV), policy=POLICY)
    # the same value given again is no change; an option the stored run predates is its default
    plan_resume(_stored(), stored_config, _config(options={"tvm_fast_math": "on"}), explicit={"--tvm-fast-math"},
                now=dict(ENV), policy=POLICY)
    with pytest.raises(ResumeRefused, match="--onnx-opset was 20 in that run, now 18"):
        plan_resume(_stored(), stored_config, _config(options={"onnx_opset": 18}), explicit={"--onnx-opset"},
                    now=dict(ENV), policy=POLICY)
    with pytest.raises(ResumeRefused, match="--explain was False in that run, now True"):
        plan_resume(_stored(), stored_config, _config(explain=True), explicit={"--explain"}, now=dict(ENV), policy=POLICY)
    with pytest.raises(ResumeRefused, match="--output-dir cannot be given with --resume"):
        plan_resume(_stored(), stored_config, _config(), explicit={"--output-dir"}, now=dict(ENV), policy=POLICY)


def test_every_run_flag_declares_its_resume_rule():
    """A new flag is declared with its rule (compare.cli._arg), or it is a backend's option,
    which resume checks against the stored run; a checked or overridable one names its field."""
    from compare.harness import resume
    from compare.harness.runner import RunConfig

    parser = build_parser()
    for command in ("run", "paper"):
        sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices[command]
        flags = {o for a in sub._actions for o in a.option_strings if o.startswith("--") and o != "--help"}
        policy = resume_policy(parser, command)
        assert flags - set(policy) - set(resume.backend_option_flags()) == set(), command
        fields = {f for rule, f in policy.values() if rule in (resume.CHECKED, resume.OVERRIDABLE)}
        assert fields <= set(RunConfig.__dataclass_fields__), fields - set(RunConfig.__dataclass_fields__)
    assert policy["--output-dir"][0] == "refused" and policy["--threads"] == ("checked", "threads")


def test_an_option_copied_as_parsed_reaches_its_config_field_and_is_declared_once(tmp_path):
    """make_config takes every ``copy`` option from its declaration (cli._arg), not a list of its own."""
    import inspect

    from compare import cli, config

    argv = ["run", "--backends", "eager", "--workloads", "mlp", "--output-dir", str(tmp_path), "--timeout", "7",
            "--seed", "3", "--numerics-draws", "2", "--thread-spin", "default", "--keep-work-dirs"]
    args = cli.parse(argv)
    made = config.make_config(args)
    assert len(args.copied_fields) >= 19
    for dest, field in args.copied_fields:
        assert getattr(made, field) == getattr(args, dest), field
        assert f" {field}=" not in inspect.getsource(config.make_config), field  # not set a second time
    assert (made.timeout_s, made.seed, made.numerics_draws, made.thread_spin, made.keep_work_dirs) == (
        7.0, 3, 2, "default", True)


def test_a_run_option_reaches_the_worker_through_its_field_of_the_same_name(tmp_path):
    """CellSpecs.spec copies every RunConfig field that CellSpec also has, unless it derives it."""
    from compare import cli, config
    from compare.harness.cells import SPEC_DERIVED, CellSpecs, shared_fields
    from workloads import builtin_workloads

    args = cli.parse(["run", "--backends", "eager", "--workloads", "mlp", "--output-dir", str(tmp_path),
                      "--seed", "5", "--numerics-draws", "3", "--calibration-batches", "2", "--explain"])
    made = config.make_config(args)
    spec = CellSpecs(made).spec(builtin_workloads()["mlp"], "eager")
    assert {"seed", "numerics_draws", "calibration_batches", "explain", "threads"} <= set(shared_fields(type(made)))
    assert not set(shared_fields(type(made))) & set(SPEC_DERIVED)
    for name in shared_fields(type(made)):
        assert getattr(spec, name) == getattr(made, name), name
    assert (spec.seed, spec.numerics_draws, spec.calibration_batches, spec.explain) == (5, 3, 2, True)
    assert (spec.scenario, spec.scenario_options) == (made.scenario, made.scenario_options)  # mlp: the run's


def test_each_flagged_field_is_the_one_declaration_of_its_flag():
    """A RunConfig field's flag (run_config.run_option) is declared nowhere else: --help
    prints it in its field's section, and the cli's run options name neither the flag nor
    the field (``list`` has a --device of its own)."""
    import dataclasses
    import inspect

    from compare import cli
    from compare.harness.run_config import GROUPS, flagged_fields

    source = inspect.getsource(cli._add_run_arguments) + inspect.getsource(cli._add_unfielded)
    run = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction").choices["run"]
    sections = {g.title: {o for a in g._group_actions for o in a.option_strings} for g in run._action_groups}
    assert list(GROUPS) == [t for t in sections if t in GROUPS]
    flagged = flagged_fields("run")
    assert len(flagged) >= 30
    for f in flagged:
        flag = f.metadata["flag"]
        assert flag in sections[f.metadata["group"]], flag
        assert f'"{flag}"' not in source, flag
    # the flags there fill fields that have no flag of their own, or one more way to one (--model)
    import re

    assert set(re.findall(r'field="(\w+)"', source)) == {"workload_files", "timing"}
    # the fields without a flag of their own are few, and each is made by make_config or the runner
    unflagged = {f.name for f in dataclasses.fields(RunConfig)} - {f.name for f in flagged_fields("run")}
    assert unflagged == {"reference", "timing", "scenario_options", "malloc_env", "options", "preset"}
