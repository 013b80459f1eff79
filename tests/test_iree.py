"""IREE compiles the five workloads for the host CPU and matches eager."""
import importlib.util

import pytest

from conftest import FAST, load_results, run_cli

pytestmark = pytest.mark.skipif(importlib.util.find_spec("iree.turbine") is None, reason="iree-turbine not installed")


def test_iree_small_five_workloads(tmp_path):
    proc = run_cli("--backends", "iree", "--size", "small", *FAST,
                   "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cells = [c for c in load_results(tmp_path)["cells"] if c["backend"] == "iree"]
    assert len(cells) == 5
    for c in cells:
        assert c["status"] == "ok" and c["numerics_ok"] is True, c
        assert set(c["compile_phases"]) == {"export", "compile", "load", "first_call"}
        assert c["info"]["driver"] == "local-task"  # 2 threads by default here... or more
        assert c["info"]["vmfb_bytes"] > 0
        # exactly one IREE worker per thread, as IREE's runtime itself created them
        assert c["settings"]["task_topology_group_count"] == c["threads"]
        assert c["info"]["task_workers_observed"] == c["threads"]
        assert c["settings"]["iree-llvmcpu-target-cpu"] == "host"


def test_iree_one_thread_uses_local_sync(tmp_path):
    proc = run_cli("--backends", "iree", "--workloads", "mlp", "--size", "small", "--threads", "1",
                   *FAST, "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cell = next(c for c in load_results(tmp_path)["cells"] if c["backend"] == "iree")
    assert cell["info"]["driver"] == "local-sync" and cell["threads"] == 1
