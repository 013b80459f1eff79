"""--executor ray on a local Ray instance (CPU only)."""
import importlib.util

import pytest

from conftest import FAST, FIXTURES, load_results, run_cli

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray not installed")

FAULTY = FIXTURES / "faulty_workloads.py"
COMMON = ["--backends", "eager,ort", "--workload-file", FAULTY, "--workloads", "fine,raises,hangs",
          "--size", "small", "--timeout", "15", *FAST, "--threads", "1"]


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
            "--size", "small", "--tvm-trials", "2", "--executor", "ray", "--tuning-logs", tmp_path / "logs",
            *FAST, "--no-history"]
    first = run_cli(*args, "--output-dir", tmp_path / "a")
    second = run_cli(*args, "--output-dir", tmp_path / "b")
    assert first.returncode == 0 and second.returncode == 0, second.stdout + second.stderr
    tuning = [next(c for c in load_results(tmp_path / r)["cells"] if c["backend"] == "tvm")["info"]["tuning"]
              for r in ("a", "b")]
    assert tuning[0]["reused"] is False and tuning[1]["reused"] is True
