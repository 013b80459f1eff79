"""The TVM tuning-log store without TVM: keys, validation, locking, commands."""
import json
import multiprocessing

import pytest
from filelock import Timeout

from adapters.base import target_key
from adapters.tvm.log_store import META_FILE, RECORD_FILE, WORKLOAD_FILE, TuningLogStore, list_logs
from conftest import run_cli

TKEY = "cpu_llvm-znver5_2t_tvm0.27.0.post1"


def _fake_scratch(path, run_secs=((1e-4, 1.1e-4), (5e-5,), (1e10,))):
    """A database in MetaSchedule's line format: [workload index, [trace, run_secs, target, args]]."""
    path.mkdir(parents=True, exist_ok=True)
    (path / WORKLOAD_FILE).write_text('["0x1", {"fake": "module"}]\n["0x2", {"fake": "module2"}]\n')
    lines = [json.dumps([i % 2, [[], list(secs), {"kind": "llvm"}, []]]) for i, secs in enumerate(run_secs)]
    (path / RECORD_FILE).write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.unit
def test_target_key_separates_cpu_threads_and_version():
    a = target_key("cpu", 2, {"tvm": "0.27.0"}, cpu="llvm-znver5")
    assert a != target_key("cpu", 1, {"tvm": "0.27.0"}, cpu="llvm-znver5")
    assert a != target_key("cpu", 2, {"tvm": "0.26.0"}, cpu="llvm-znver5")
    assert a != target_key("cpu", 2, {"tvm": "0.27.0"}, cpu="llvm-skylake-avx512")
    assert "/" not in a


@pytest.mark.unit
def test_commit_inspect_and_history(tmp_path):
    store = TuningLogStore(tmp_path / "log", TKEY, "mlp-small-x")
    assert not store.inspect().usable
    with store.lock():
        store.commit(_fake_scratch(tmp_path / "scratch"), {"trials_budget": 3})
    state = store.inspect()
    assert state.usable and state.records == 3 and state.meta["trials_budget"] == 3
    history = store.history()
    assert [h["trials"] for h in history] == [2, 1]
    assert history[0]["best_ms"] == pytest.approx(0.105)  # mean of the run_secs of record 0
    assert history[1]["best_ms"] == pytest.approx(0.05)  # the failed 1e10 run is ignored
    assert history[0]["run_ms"][1] is None


@pytest.mark.unit
def test_log_from_another_target_is_set_aside(tmp_path):
    folder = tmp_path / "log"
    TuningLogStore(folder, "cpu_other-cpu_2t_tvm0.27.0", "w").commit(
        _fake_scratch(tmp_path / "s"), {"trials_budget": 3}
    )
    state = TuningLogStore(folder, TKEY, "w").inspect()
    assert not state.usable and "made for target" in state.warning
    assert not (folder / RECORD_FILE).exists()  # moved aside, not deleted
    assert any(p.name.startswith(".log.set-aside") for p in tmp_path.iterdir())


@pytest.mark.unit
@pytest.mark.parametrize("damage", ["truncate", "garbage", "no_meta", "bad_index"])
def test_damaged_log_is_set_aside_with_a_warning(tmp_path, damage):
    folder = tmp_path / "log"
    store = TuningLogStore(folder, TKEY, "w")
    store.commit(_fake_scratch(tmp_path / "s"), {"trials_budget": 3})
    records = folder / RECORD_FILE
    if damage == "truncate":
        records.write_bytes(records.read_bytes()[:-25])
    elif damage == "garbage":
        records.write_bytes(b"\x00\xff not json\n")
    elif damage == "no_meta":
        (folder / META_FILE).unlink()
    else:
        records.write_text(json.dumps([7, [[], [1e-4], {}, []]]) + "\n")
    state = store.inspect()
    assert not state.usable
    assert "re-tuning" in state.warning


def _hold_lock(folder, held, release):
    with TuningLogStore(folder, TKEY, "w").lock():
        held.set()
        release.wait(30)


def test_lock_excludes_another_process(tmp_path):
    folder = tmp_path / "log"
    folder.mkdir()
    spawn = multiprocessing.get_context("spawn")
    held, release = spawn.Event(), spawn.Event()
    proc = spawn.Process(target=_hold_lock, args=(folder, held, release))
    proc.start()
    assert held.wait(60), "the child never took the lock"
    lock = TuningLogStore(folder, TKEY, "w").lock()
    with pytest.raises(Timeout):  # held by the child: not ours to take
        lock.acquire(timeout=0.2)
    release.set()
    with lock.acquire(timeout=30):  # released by the child: ours now
        pass
    proc.join()


def test_tuning_logs_command_list_show_export_import_prune(tmp_path):
    root = tmp_path / "logs"
    folder = root / "tvm" / TKEY / "mlp-small-abc"
    TuningLogStore(folder, TKEY, "mlp-small-abc").commit(
        _fake_scratch(tmp_path / "s"), {"trials_budget": 3, "task_names": ["fused_a", "fused_b"]})
    assert list_logs(root)[0]["trials"] == 3
    listed = run_cli("tuning-logs", "--tuning-logs", root, "list")
    assert listed.returncode == 0 and "mlp-small-abc" in listed.stdout
    assert run_cli("tvm-logs", "--tuning-logs", root, "list").stdout == listed.stdout  # the same command by its other name
    shown = run_cli("tuning-logs", "--tuning-logs", root, "show", f"{TKEY}/mlp-small-abc")
    assert shown.returncode == 0 and "fused_a: 2 trials" in shown.stdout
    missing = run_cli("tuning-logs", "--tuning-logs", root, "show", "nope/nope")
    assert missing.returncode == 2 and "no tuning log" in missing.stderr
    archive = tmp_path / "logs.tar.gz"
    assert run_cli("tuning-logs", "--tuning-logs", root, "export", archive).returncode == 0
    other = tmp_path / "other"
    imported = run_cli("tuning-logs", "--tuning-logs", other, "import", archive)
    assert imported.returncode == 0, imported.stderr
    assert list_logs(other)[0]["trials"] == 3
    pruned = run_cli("tuning-logs", "--tuning-logs", other, "prune", "--target", "znver5")
    assert pruned.returncode == 0 and list_logs(other) == []
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"not an archive")
    refused = run_cli("tuning-logs", "--tuning-logs", other, "import", bad)
    assert refused.returncode == 2 and "not a readable" in refused.stderr
