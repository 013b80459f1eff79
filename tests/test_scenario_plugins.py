"""Scenarios as plug-ins (compare.scenarios): found, not listed, and each one's code in its
own module, so that adding a scenario touches its module, its test and its docs."""
import re
from pathlib import Path

import pytest

from compare.results.schema import Cell, RunResults
from compare.scenarios import DEFAULT, ReportSection, Scenario, scenario, scenarios
from compare.scenarios.base import Scenario as BaseScenario

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
# The timing mechanics every scenario is built from (the sampler's knobs, such as
# TimingConfig.offline, recorded in every results file's config) sit below the scenarios.
MECHANICS = ("compare/measure",)


BUILT_IN = ["back-to-back", "single-stream", "offline", "server", "decode"]


def test_the_registry_lists_every_scenario_in_order():
    # a new scenario adds itself where its rank says, without this test changing
    assert [name for name in scenarios() if name in BUILT_IN] == BUILT_IN
    assert [s.rank for s in scenarios().values()] == sorted(s.rank for s in scenarios().values())
    assert scenario(None).name == DEFAULT == "back-to-back"
    with pytest.raises(ValueError, match="unknown scenario 'nope'"):
        scenario("nope")


@pytest.mark.parametrize("name", list(scenarios()))
def test_each_scenario_declares_its_hooks(name, tmp_path):
    from compare import cli, config

    each = scenario(name)
    assert isinstance(each, Scenario) and each.name == name and each.help
    assert each.header({"scenario": name, "timing": {"min_samples": 5}}).startswith(name)
    args = cli.parse(["--scenario", name, "--output-dir", str(tmp_path)])
    config.suite_defaults(args)  # as make_config does first: --processes and --min-samples set
    timing = each.timing({"budget_s": 1.0, "min_samples": 5, "sample_warmup": True}, args)
    assert timing["budget_s"] == 1.0  # a scenario changes the fields it needs, keeps the others
    empty = Cell.from_flat("mlp", "eager", "ok")
    each.derive(empty, {"scenario": name})  # nothing measured: nothing derived, nothing raised
    assert each.csv_columns(empty) == {} and each.cell_info(None, 1) == {}
    sections = each.sections(RunResults(environment={}, config={}, cells=[]))
    assert all(isinstance(s, ReportSection) and s.title and s.rows == [] for s in sections)


def test_the_default_hooks_do_nothing():
    class Bare(BaseScenario):
        name = "bare"

    bare = Bare()
    assert bare.timing({"budget_s": 2.0}, None) == {"budget_s": 2.0}
    assert bare.header({}) == "bare" and bare.sections(RunResults(environment={}, config={}, cells=[])) == []


def test_the_command_line_offers_every_scenario(tmp_path):
    import argparse

    from compare import cli

    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    action = next(a for a in sub.choices["run"]._actions if "--scenario" in a.option_strings)
    assert list(action.choices) == list(scenarios()) and action.default == DEFAULT
    assert all(f"{s.name}: {s.help}" in action.help for s in scenarios().values())
    for name, each in scenarios().items():
        # a scenario that claims workloads (decode: the decoders) runs only those
        assert each.claims_workloads == (type(each).claims is not BaseScenario.claims), name
        claimed = ["--suite", "llm", "--size", "small"] if each.claims_workloads else []
        argv = ["--scenario", name, *claimed, "--output-dir", str(tmp_path / name)]
        assert cli.make_config(cli.parse(argv)).scenario == name


def _generic_files() -> list[Path]:
    files = [*(ROOT / "compare").rglob("*.py"), *(ROOT / "compare/report/templates").glob("*.html")]
    return [f for f in files if not any(f.relative_to(ROOT).as_posix().startswith(p)
                                        for p in ("compare/scenarios/", *MECHANICS))]


def test_no_generic_module_names_the_offline_scenario():
    """Offline lives in compare/scenarios/offline.py alone: the command line, the worker,
    the records and the reports loop over the registry."""
    naming = [f"{f.relative_to(ROOT)}:{n}" for f in _generic_files()
              for n, line in enumerate(f.read_text().splitlines(), 1) if re.search("offline", line, re.I)]
    assert naming == []


# The generic code the registry replaced a list of scenarios in. The records' field
# comments (compare/results/schema.py) still say which scenario fills each field.
GENERIC = ("compare/cli.py", "compare/config.py", "compare/worker/steps.py", "compare/results/derived.py",
           "compare/report/text.py", "compare/report/html.py", "compare/report/templates/report.html")


@pytest.mark.parametrize("name", list(scenarios()))
def test_the_generic_code_names_no_scenario(name):
    named = re.compile(rf"""["']{re.escape(name)}["']|--scenario {re.escape(name)}\b""")
    naming = [f"{path}:{n}" for path in GENERIC
              for n, line in enumerate((ROOT / path).read_text().splitlines(), 1) if named.search(line)]
    assert naming == []


def test_a_notebook_load_gets_every_scenarios_figures_and_columns(tmp_path):
    """compare.load in a fresh interpreter (nothing else imported): the records cannot
    import the scenarios, so the loader does, and an offline cell's throughput is there."""
    import json
    import subprocess
    import sys

    from compare.measure.latency import LatencyStats

    setting = {"streams": 2, "requests_in_flight": 4, "threads_per_stream": 1, "source": "test",
               "requests_per_sample": 100}
    cell = Cell.from_flat("mlp", "ort", "ok", latency=LatencyStats.from_ms([2.0, 2.1, 1.9], 100),
                eager_latency=LatencyStats.from_ms([4.0, 4.1, 3.9], 50), process_samples=[3],
                info={"offline": {"batch": 8, "backend": setting, "eager": setting}})
    run = RunResults(environment={}, config={"scenario": "offline"}, cells=[cell])
    (tmp_path / "results.json").write_text(json.dumps(run.to_dict()))
    code = ("import compare\n"
            f"frame = compare.load({str(tmp_path)!r}).to_pandas()\n"
            "print(round(frame['throughput_per_s'][0]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "500"


def test_an_installed_package_adds_a_scenario_through_its_entry_point(monkeypatch):
    import importlib.metadata
    import types

    import compare.scenarios as registry

    class Burst(BaseScenario):
        name = "burst"
        rank = 500

    class Impostor(BaseScenario):
        name = "offline"  # a built-in name is never replaced

    points = [types.SimpleNamespace(load=lambda cls=cls: cls, value=f"pkg:{cls.__name__}") for cls in (Burst, Impostor)]
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group: points if group == registry.ENTRY_POINT_GROUP else [])
    registry.scenarios.cache_clear()
    try:
        found = registry.scenarios()
        assert list(found)[-1] == "burst" and type(found["offline"]).__module__ == "compare.scenarios.offline"
    finally:
        monkeypatch.undo()
        registry.scenarios.cache_clear()
    assert "burst" not in registry.scenarios()


def test_a_decoder_runs_the_decode_scenario_whatever_the_runs(tmp_path):
    """Decode claims the decoders (their tag): --suite llm runs it, a mixed run gives their
    cells alone to it, and another scenario asked for the decoders alone is a usage error."""
    from compare import cli
    from compare.config import UsageError
    from compare.harness.cells import CellSpecs
    from workloads import resolve_workloads

    def made(*argv):
        return cli.make_config(cli.parse([*argv, "--size", "small", "--output-dir", str(tmp_path)]))

    assert made("--suite", "llm").scenario == "decode"
    mixed = made("--suite", "all", "--scenario", "single-stream")
    specs = {w.name: CellSpecs(mixed).spec(w, "eager") for w in resolve_workloads(None, [], "all")}
    assert specs.pop("gpt2_decode").scenario == "decode"  # the toy decoder of the hand-written suites
    assert {s.scenario for s in specs.values()} == {"single-stream"}
    with pytest.raises(UsageError, match="run only under --scenario decode"):
        made("--suite", "llm", "--scenario", "offline")
    with pytest.raises(UsageError, match="--scenario decode runs only the workloads it claims; mlp is not one"):
        made("--scenario", "decode", "--workloads", "mlp")


def test_an_added_scenarios_figures_need_no_field_in_the_records():
    """A scenario module's own figures travel as ``scenario_extra`` under its name, from the
    worker's measurement to the cell, results.json and its CSV columns: adding one touches no
    record (compare/results/)."""
    from compare.measure.latency import LatencyStats
    from compare.results import extensions
    from compare.results.protocol import CellMeasurement

    class Burst(BaseScenario):
        name = "burst"

        def after_timing(self, compiled, prepared, setup, spec, timed, emit):
            return {"scenario_extra": {self.name: {"calls": 3, "ms": 6.0}}}

        def derive(self, cell, config):
            own = (cell.scenario.scenario_extra or {}).get(self.name)
            if own:
                own["ms_per_call"] = own["ms"] / own["calls"]

        def csv_columns(self, cell):
            own = (cell.scenario.scenario_extra or {}).get(self.name)
            return {"burst_ms_per_call": own.get("ms_per_call")} if own else {}

    burst = Burst()
    stats = LatencyStats.from_ms([1.0, 1.1, 0.9], 10)
    measured = CellMeasurement(status="ok", latency=stats, eager_latency=stats,
                               **burst.after_timing(None, None, None, None, {}, lambda **_: None))
    cell = Cell.from_measurement(measured, workload="mlp", backend="ort", role="candidate", size="small", device="cpu",
                                 threads=1, batch=None, dtype="fp32")
    burst.derive(cell, {})
    again = Cell.from_dict(cell.to_dict())
    assert again.scenario.scenario_extra == {"burst": {"calls": 3, "ms": 6.0, "ms_per_call": 2.0}}
    extensions.register(figures=burst.derive, columns=burst.csv_columns)
    try:
        from compare.results.schema import cell_row

        assert cell_row(again)["burst_ms_per_call"] == 2.0
    finally:
        extensions._figures.remove(burst.derive)
        extensions._columns.remove(burst.csv_columns)
