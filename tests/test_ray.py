"""--executor ray on a local Ray instance (CPU only)."""
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import FAST, FIXTURES, ROOT, load_results, run_cli, with_test_defaults

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray not installed")

FAULTY = FIXTURES / "faulty_workloads.py"
# The timeout must outlast a small ORT export on a loaded CI machine: at 15 s, with the slow
# tier's heaviest test in the other xdist worker, 'fine' x ort timed out in its export once.
COMMON = ["--backends", "eager,ort", "--workload-file", FAULTY, "--workloads", "fine,raises,hangs",
          "--size", "small", "--timeout", "45", *FAST, "--threads", "1"]


def _by_key(out):
    return {(c["workload"], c["backend"]): c for c in load_results(out)["cells"]}


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    base = tmp_path_factory.mktemp("ray")
    local = run_cli(*COMMON, "--output-dir", base / "local", "--no-history")
    ray = run_cli(*COMMON, "--executor", "ray", "--output-dir", base / "ray", "--no-history")
    return base, local, ray


@pytest.mark.slow  # Ray starts a local cluster; the executor is optional
def test_ray_gives_the_same_cells_statuses_and_numerics(both):
    base, local, ray = both
    assert local.returncode == ray.returncode == 1, ray.stdout + ray.stderr
    a, b = _by_key(base / "local"), _by_key(base / "ray")
    assert set(a) == set(b) and len(a) == 6
    for key in a:
        assert a[key]["status"] == b[key]["status"], key
        assert a[key]["numerics_ok"] == b[key]["numerics_ok"]
        if a[key]["status"] == "ok":
            assert a[key]["max_abs_err"] == b[key]["max_abs_err"]
    assert b[("hangs", "eager")]["status"] == "timeout"  # a hang is recorded, the rest finish
    assert b[("raises", "ort")]["status"] == "failed"
    assert all(c["info"]["node"]["hostname"] for c in b.values() if c.get("info"))
    assert load_results(base / "ray")["environment"]["executor"]["kind"] == "ray"
    assert (base / "ray" / b[("raises", "eager")]["log"]).read_text()  # the node's log came back


@pytest.mark.slow  # a real tuning through Ray: the default tier tunes through the local executor
@pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="apache-tvm not installed")
def test_records_tuned_by_one_task_are_reused_by_a_later_one(tmp_path):
    args = ["--backends", "tvm", "--workload-file", FIXTURES / "tiny_workloads.py", "--workloads", "tiny_linear",
            "--size", "small", "--tvm-trials", "2", "--tvm-min-trials-per-task", "1", "--executor", "ray",
            "--tuning-logs", tmp_path / "logs",
            *FAST, "--no-history"]
    first = run_cli(*args, "--output-dir", tmp_path / "a")
    second = run_cli(*args, "--output-dir", tmp_path / "b")
    assert first.returncode == 0 and second.returncode == 0, second.stdout + second.stderr
    tuning = [next(c for c in load_results(tmp_path / r)["cells"] if c["backend"] == "tvm")["info"]["tuning"]
              for r in ("a", "b")]
    assert tuning[0]["reused"] is False and tuning[1]["reused"] is True


@pytest.mark.slow  # a two-node Ray cluster on this machine, one node killed mid-run, then a resume
def test_a_node_lost_mid_run_costs_its_cells_which_resume_completes(tmp_path, monkeypatch):
    from ray.cluster_utils import Cluster

    watched = Path(tempfile.mkdtemp(prefix="dlc-ray-", dir="/tmp"))  # short: Ray's socket paths live below it
    monkeypatch.setenv("TMPDIR", str(watched))  # the nodes' task folders land here, where we watch them
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    worker = cluster.add_node(num_cpus=1)  # a second raylet: cells spread over both nodes
    args = ["--backends", "eager", "--workload-file", FIXTURES / "slow_workloads.py", "--workloads",
            "slow1,slow2,slow3", "--size", "small", "--threads", "1", *FAST, "--no-history",
            "--executor", "ray", "--ray-address", cluster.address]
    out = tmp_path / "run"
    try:
        run = subprocess.Popen([sys.executable, "-m", "compare", *with_test_defaults([*args, "--output-dir", out])],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 120
        while len(list(watched.glob("dlcompare-ray-*"))) < 2:  # a cell running on each node
            assert time.monotonic() < deadline and run.poll() is None, "two cells never ran at once"
            time.sleep(0.2)
        cluster.remove_node(worker)  # kills the node's raylet and the cell running there
        assert run.wait(300) == 1, run.stdout.read()
        cells = {c["workload"]: c for c in load_results(out)["cells"]}
        lost = [c for c in cells.values() if c["status"] != "ok"]
        assert len(cells) == 3 and len(lost) == 1, cells
        assert lost[0]["transient"] is True and lost[0]["error"].startswith("worker killed by node loss")
        resumed = run_cli(*args, "--resume", out)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert all(c["status"] == "ok" for c in load_results(out)["cells"])
    finally:
        cluster.shutdown()
        shutil.rmtree(watched, ignore_errors=True)
