"""TVM with real MetaSchedule tuning (tiny budgets, small shapes)."""
import json
import os
import shutil

import pytest

from adapters.tvm.log_store import RECORD_FILE
from conftest import FAST, FIXTURES, load_results, run_cli

pytestmark = pytest.mark.skipif(
    __import__("importlib.util").util.find_spec("tvm") is None, reason="apache-tvm not installed"
)

# One operator -> one tuning task: real MetaSchedule tuning in well under a minute
# (the per-task floor at 1, so the trial budgets below are the ones tuned).
COMMON = ["--workload-file", FIXTURES / "tiny_workloads.py", "--workloads", "tiny_linear", "--size", "small",
          "--tvm-trials", "4", "--tvm-min-trials-per-task", "1", "--time-budget", "0.3", "--min-samples", "3", "--reference-processes", "1"]


def _tvm_cell(out):
    return next(c for c in load_results(out)["cells"] if c["backend"] == "tvm")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    base = tmp_path_factory.mktemp("tvm")
    logs = base / "logs"
    # 16 trials in rounds of 8, and a time budget that runs out in the first round
    first = run_cli("--backends", "tvm-untuned,tvm", *COMMON, "--tvm-trials", "16", "--tvm-tune-minutes", "0.01",
                    "--tuning-logs", logs, "--output-dir", base / "r1", "--processes", "2")
    assert first.returncode == 0, first.stdout + first.stderr
    second = run_cli("--backends", "tvm", *COMMON, "--tuning-logs", logs, "--output-dir", base / "r2")
    assert second.returncode == 0, second.stdout + second.stderr
    return base, logs


def test_first_run_tunes_and_writes_keyed_logs(tuned):
    base, logs = tuned
    cell = _tvm_cell(base / "r1")
    assert cell["status"] == "ok" and cell["numerics_ok"] is True
    tuning = cell["info"]["tuning"]
    assert tuning["reused"] is False and tuning["trials_measured"] > 0 and tuning["tasks"] >= 1
    assert cell["compile_phases"]["tune"] > 1.0
    assert set(cell["compile_phases"]) == {"export", "frontend", "tune", "build", "load", "first_call"}
    log_dir = logs / "tvm" / tuning["target_key"]
    assert f"_{cell['threads']}t_" in tuning["target_key"] and "tvm0.27" in tuning["target_key"]
    stored = list(log_dir.glob(f"tiny_linear-small-*/{RECORD_FILE}"))
    assert len(stored) == 1
    assert tuning["history"] and all(h["trials"] > 0 for h in tuning["history"])
    # the tuning's wall time is kept with the log and counted in the break-even
    assert cell["tuning_s"] == pytest.approx(cell["compile_phases"]["tune"])
    assert cell["settings"]["tvm_trials"] == 16 and cell["settings"]["tvm_tune_minutes"] == 0.01
    # MetaSchedule's builder and runner are child processes: the compile peak counts them
    assert cell["compile_children_peak_mb"] > 0
    untuned = next(c for c in load_results(base / "r1")["cells"] if c["backend"] == "tvm-untuned")
    assert untuned["status"] == "ok" and untuned["numerics_ok"] is True
    assert "tune" not in untuned["compile_phases"]


def test_the_second_process_reuses_the_first_ones_log(tuned):
    """TVM's warm path is its tuning log: the second process of a cold cell searches nothing."""
    base, _ = tuned
    first, warm = _tvm_cell(base / "r1")["processes"]
    assert first["cache"] == "cold" and first["compile_phases"]["tune"] > 1.0
    assert warm["cache"] == "hit" and warm["compile_phases"]["tune"] < 0.5
    untuned = next(c for c in load_results(base / "r1")["cells"] if c["backend"] == "tvm-untuned")
    assert untuned["warm_cache"] == "miss"  # nothing stored: it builds again, and says so


def test_time_budget_stops_tuning_and_is_reported(tuned):
    base, _ = tuned
    cell = _tvm_cell(base / "r1")
    tuning = cell["info"]["tuning"]
    assert tuning["stopped_by"] == "time" and 0 < tuning["trials_measured"] < 16
    assert "time budget reached" in (base / "r1" / "summary.md").read_text()
    # one tuning-curve point per round, and MetaSchedule's own profile of where the time went
    assert tuning["curve"] and tuning["curve"][-1]["trials"] == tuning["trials_measured"]
    assert tuning["curve"][-1]["estimated_ms"] > 0
    assert {"Total", "SendToBuilder", "SendToRunner"} <= set(tuning["profile"])
    assert tuning["search_settings"]["trials_per_round"] == 8


def test_every_kernel_has_a_schedule(tuned):
    base, _ = tuned
    cells = {c["backend"]: c for c in load_results(base / "r1")["cells"]}
    assert cells["tvm"]["info"]["unscheduled_functions"] == []
    # untuned TVM is TVM's default CPU pipeline plus schedules, not naked loop nests
    untuned = cells["tvm-untuned"]
    assert untuned["info"]["unscheduled_functions"] == [] and untuned["info"]["default_scheduled"]
    assert "dlight" in untuned["settings"]["default_schedules"] and "FastMath" in untuned["settings"]["math"]


def test_second_run_reuses_the_log(tuned):
    base, _ = tuned
    first, second = _tvm_cell(base / "r1"), _tvm_cell(base / "r2")
    assert second["info"]["tuning"]["reused"] is True
    assert second["info"]["tuning"]["trials_measured"] == 0
    assert second["compile_phases"]["tune"] < 0.05
    assert second["compile_s"] < first["compile_s"] / 5
    assert second["max_abs_err"] == pytest.approx(first["max_abs_err"], abs=1e-6)
    # a reused log still carries the tuning that made it
    assert second["tuning_s"] == pytest.approx(first["tuning_s"])
    if second["break_even_calls"] is not None:
        assert second["break_even_calls"] > second["break_even_calls_excl_tuning"]


@pytest.mark.slow  # a second real tuning
def test_a_second_model_takes_the_task_it_shares_from_the_store_and_tunes_only_its_own(tuned, tmp_path):
    base, logs = tuned
    args = [a if a != "tiny_linear" else "tiny_two_linears" for a in COMMON]
    proc = run_cli("--backends", "tvm", *args, "--tuning-logs", logs, "--output-dir", tmp_path / "two")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cell = _tvm_cell(tmp_path / "two")
    tuning = cell["info"]["tuning"]
    assert cell["status"] == "ok" and cell["numerics_ok"] is True and tuning["tasks"] == 2
    (shared,) = tuning["tasks_from_store"]  # tiny_linear's GEMM, with its origin and cost
    assert shared["from"] == "tiny_linear" and shared["best_ms"] > 0 and shared["log"].startswith("tiny_linear-small-")
    assert tuning["trials_measured"] > 0 and tuning["reused"] is False  # its own task was tuned
    # the copied record is not a trial: what was measured is all its own task's
    assert tuning["trials_per_task"] == tuning["trials_measured"] and tuning["untuned_tasks"] == []
    assert [h["trials"] > 0 for h in tuning["history"]] == [True, True]  # the log holds both tasks
    assert "1 of 2 tasks from the store (tiny_linear; about" in (tmp_path / "two" / "summary.md").read_text()
    # a run again: both tasks from its own log now, nothing searched
    again = run_cli("--backends", "tvm", *args, "--tuning-logs", logs, "--output-dir", tmp_path / "again")
    assert again.returncode == 0, again.stdout + again.stderr
    tuning = _tvm_cell(tmp_path / "again")["info"]["tuning"]
    assert tuning["reused"] is True and tuning["trials_measured"] == 0 and len(tuning["tasks_from_store"]) == 1


@pytest.mark.slow  # a real tuning of two tasks
def test_a_time_budget_spent_in_the_first_sweep_leaves_the_rest_untuned_and_says_so(tmp_path):
    """MetaSchedule's gradient scheduler sends every task a round before any result comes
    back; past the budget the builder builds no further round, so the budget holds on a
    model of many tasks, and a task without a built round runs with the default rules."""
    args = [a if a != "tiny_linear" else "tiny_two_linears" for a in COMMON]
    proc = run_cli("--backends", "tvm", *args, "--tvm-trials", "64", "--tvm-tune-minutes", "0.01",
                   "--tuning-logs", tmp_path / "logs", "--output-dir", tmp_path / "r")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cell = _tvm_cell(tmp_path / "r")
    tuning = cell["info"]["tuning"]
    assert cell["status"] == "ok" and cell["numerics_ok"] is True and tuning["stopped_by"] == "time"
    assert tuning["candidates_skipped_at_deadline"] > 0 and len(tuning["untuned_tasks"]) == 1
    # the first round was built and measured; the skipped candidates are no trials
    assert tuning["trials_measured"] == tuning["search_settings"]["trials_per_round"]


@pytest.mark.slow  # a tuning killed after its first round, then resumed
def test_a_tuning_killed_after_a_round_resumes_from_its_committed_records(tmp_path):
    site = tmp_path / "site" / "dlcompare_dying-0.1.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Metadata-Version: 2.1\nName: dlcompare-dying\nVersion: 0.1\n")
    (site / "entry_points.txt").write_text("[dlcompare.backends]\n"
                                           "dying-tuner = dlcompare_dying_tuner_backend:DyingTunerBackend\n")
    env = {"PYTHONPATH": os.pathsep.join([str(site.parent), str(FIXTURES / "plugin")])}
    args = [*COMMON, "--tvm-trials", "16", "--tuning-logs", tmp_path / "logs"]
    run_cli("--backends", "dying-tuner", *args, "--output-dir", tmp_path / "died", env=env)
    died = next(c for c in load_results(tmp_path / "died")["cells"] if c["backend"] == "dying-tuner")
    assert died["status"] == "failed" and "code 9" in died["error"]  # killed in the middle of its tuning
    (meta_path,) = (tmp_path / "logs").glob("tvm/*/tiny_linear-small-*/dlcompare-tuning.json")
    meta = json.loads(meta_path.read_text())  # what the first round committed
    assert meta["stopped_by"] == "interrupted" and 0 < meta["trials_budget"] < 16 and meta["tuning_s"] > 0
    resumed = run_cli("--backends", "tvm", *args, "--output-dir", tmp_path / "resumed", env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    tuning = _tvm_cell(tmp_path / "resumed")["info"]["tuning"]
    assert tuning["trials_budget_in_log"] == 16 and tuning["trials_in_log"] >= meta["trials_budget"]
    assert 0 < tuning["trials_measured"] <= 16 - meta["trials_budget"]  # only what the budget still lacked
    assert tuning["tuning_s_total"] > meta["tuning_s"]  # the killed run's tuning counted too


@pytest.mark.slow  # a second real tuning; damaged logs are also tested in test_tuning_store
def test_corrupt_log_is_set_aside_and_retuned(tuned, tmp_path):
    base, shared_logs = tuned
    tuning = _tvm_cell(base / "r1")["info"]["tuning"]
    # tiny_linear's log alone: another model's log in the shared store (tiny_two_linears, where
    # an earlier test ran) would hand its task back from the store, and nothing would be tuned
    (own,) = (shared_logs / "tvm" / tuning["target_key"]).glob("tiny_linear-small-*")
    logs = tmp_path / "logs"
    shutil.copytree(own, logs / "tvm" / tuning["target_key"] / own.name)
    records = logs / "tvm" / tuning["target_key"] / own.name / RECORD_FILE
    records.write_bytes(records.read_bytes().rstrip(b"\n")[:-7])  # the last line cut mid-record
    proc = run_cli("--backends", "tvm", *COMMON, "--tuning-logs", logs, "--output-dir", tmp_path / "r3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cell = _tvm_cell(tmp_path / "r3")
    assert "corrupt" in cell["info"]["tuning"]["tuning_log_warning"]
    assert cell["info"]["tuning"]["reused"] is False and cell["info"]["tuning"]["trials_measured"] > 0
    assert cell["numerics_ok"] is True


@pytest.mark.slow
def test_retune_tunes_again(tuned, tmp_path):
    base, logs = tuned
    proc = run_cli("--backends", "tvm", *COMMON, "--retune", "--tuning-logs", logs, "--output-dir", tmp_path / "r4")
    assert proc.returncode == 0
    tuning = _tvm_cell(tmp_path / "r4")["info"]["tuning"]
    assert tuning["retuned"] is True and tuning["reused"] is False and tuning["trials_measured"] > 0


@pytest.mark.slow  # the tuned fixture runs tvm-untuned too, on one workload
def test_untuned_agrees_with_eager_on_all_five(tmp_path):
    proc = run_cli("--backends", "tvm-untuned", "--size", "small", *FAST,
                   "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cells = [c for c in load_results(tmp_path)["cells"] if c["backend"] == "tvm-untuned"]
    assert len(cells) == 5 and all(c["status"] == "ok" and c["numerics_ok"] for c in cells)


@pytest.mark.slow  # a second real tuning
def test_a_one_program_space_stops_after_its_one_trial(tmp_path):
    proc = run_cli("--backends", "tvm", *COMMON[:3], "tiny_pointwise", *COMMON[4:], "--tvm-trials", "64",
                   "--tuning-logs", tmp_path / "logs", "--output-dir", tmp_path / "r")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tuning = _tvm_cell(tmp_path / "r")["info"]["tuning"]
    assert tuning["stopped_by"] == "space exhausted" and tuning["trials_measured"] == 1
    assert len(tuning["curve"]) == 1  # no empty search after the one program was measured
