"""A new backend is one file: a module outside the package, registered through the
``dlcompare.backends`` entry point, is listed, gets its CLI option, has its package
recorded, and runs as a cell, with no file of dlcompare touched."""
import json
import os
import subprocess
import sys

import pytest

from conftest import FAST, FIXTURES, load_results, run_cli

PLUGIN = FIXTURES / "plugin"


def _install_entry_point(site):
    """What pip writes for a package that declares the entry point."""
    info = site / "dlcompare_echo-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dlcompare-echo\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[dlcompare.backends]\necho = dlcompare_echo_backend:EchoBackend\n")
    return os.pathsep.join([str(site), str(PLUGIN)])


@pytest.fixture
def plugin_path(tmp_path):
    return _install_entry_point(tmp_path / "site")


@pytest.mark.unit
def test_the_entry_point_backend_is_found_with_its_option_and_package(plugin_path):
    code = ("import json; from adapters import backend_names; from compare import cli; from compare.harness import environment\n"
            "help = cli.build_parser().parse_args(['run', '--echo-note', 'x']).echo_note\n"
            "print(json.dumps([backend_names(), help, environment.tracked_distributions()]))")
    env = dict(os.environ, PYTHONPATH=plugin_path)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    names, note, tracked = json.loads(proc.stdout)
    assert names[0] == "eager" and "echo" in names
    assert note == "x" and "pytest" in tracked


def test_the_entry_point_backend_runs_as_a_cell(plugin_path, tmp_path):
    proc = run_cli("--backends", "echo", "--workloads", "mlp", "--size", "small", "--echo-note", "from the test",
                   *FAST,
                   "--output-dir", tmp_path / "run", env={"PYTHONPATH": plugin_path})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = load_results(tmp_path / "run")
    cell = next(c for c in data["cells"] if c["backend"] == "echo")
    assert cell["status"] == "ok" and cell["numerics_ok"] is True
    assert cell["settings"]["note"] == "from the test" and cell["info"]["wrapped"] is True
    assert list(cell["compile_phases"]) == ["wrap", "search", "first_call"]
    assert "pytest" in cell["backend_versions"] and "pytest" in data["environment"]["versions"]
    # what it shows in the reports comes from its own class, not from dlcompare's reports
    summary = (tmp_path / "run" / "summary.md").read_text()
    assert "ok (echo searched 3 trials)" in summary and "; echo note from the test" in summary
    assert "TVM budget" not in summary  # no TVM in this run, so no TVM condition
    assert "<h2>Tuning curves</h2>" in (tmp_path / "run" / "report.html").read_text()


def _install_mover(site):
    info = site / "dlcompare_mover-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dlcompare-mover\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[dlcompare.backends]\nmover = dlcompare_mover_backend:MoverBackend\n"
                                           "mover-quiet = dlcompare_mover_backend:QuietMoverBackend\n")
    return os.pathsep.join([str(site), str(PLUGIN)])


def test_a_backend_that_slows_the_eager_in_its_process_does_not_move_its_speedup(tmp_path):
    # Issue 56: a backend that changes its process slows the eager timed beside it in its
    # worker. The mover is eager that slows every nn.Linear outside its own calls;
    # mover-quiet is the same backend leaving nn.Linear as it is. Divided by the in-cell eager (the
    # estimator before the fix), the mover reads far faster than its control; the check
    # against the eager-only processes of the same stretches sends it to those, and the two agree.
    plugin = _install_mover(tmp_path / "site")
    proc = run_cli("--backends", "mover,mover-quiet", "--workloads", "mlp", "--size", "small", "--threads", "1",
                   "--processes", "3", "--reference-processes", "3", "--time-budget", "2",
                   "--output-dir", tmp_path / "run", env={"PYTHONPATH": plugin})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cells = {c["backend"]: c for c in load_results(tmp_path / "run")["cells"]}
    mover, quiet = cells["mover"], cells["mover-quiet"]
    assert mover["status"] == quiet["status"] == "ok"
    # the check caught the mover's worker moving its eager, and let the control's stand
    checks = {b: c["interval"]["in_cell_check"] for b, c in cells.items() if b != "eager"}
    assert checks["mover"]["moved"] and not checks["mover-quiet"]["moved"], checks
    assert mover["interval"]["reference"].startswith("eager-only") and mover["interval"]["stretches"] == 3
    assert quiet["interval"]["reference"].startswith("in-cell") and quiet["interval"]["in_cell_check"]["stretches"] == 3
    assert mover["eager_latency"]["median"] > 2 * quiet["eager_latency"]["median"]  # its process slowed its in-cell eager

    def in_cell(cell):  # the estimator before the fix: the eager timed in the backend's worker
        return cell["eager_latency"]["median"] / cell["latency"]["median"]
    assert in_cell(mover) / in_cell(quiet) > 2  # it fails the check below
    assert abs(mover["speedup"] / quiet["speedup"] - 1) < 0.15


@pytest.mark.slow  # 21 s on 2 cores, and the default suite is at its 15 minutes; CI runs it in the slow tier
def test_a_cell_whose_interval_stays_wide_gets_more_processes_up_to_the_maximum(tmp_path):
    # Issue 56: stop sampling a cell when its interval is narrow enough. The jitter backend
    # runs at half speed in every second process that compiles it, so after --processes 2
    # its interval is far wider than 5 %: a third pass runs for it (and eager-only processes
    # beside it), and no fourth, at --max-processes 3.
    site = tmp_path / "site"
    info = site / "dlcompare_jitter-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dlcompare-jitter\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[dlcompare.backends]\njitter = dlcompare_jitter_backend:JitterBackend\n")
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(PLUGIN)]),
           "DLCOMPARE_TEST_JITTER_COUNTER": str(tmp_path / "counter")}
    proc = run_cli("--backends", "jitter", "--workloads", "mlp", "--size", "small", "--threads", "1",
                   "--processes", "2", "--max-processes", "3", "--reference-processes", "2", "--time-budget", "1",
                   "--output-dir", tmp_path / "run", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = load_results(tmp_path / "run")
    cells = {c["backend"]: c for c in results["cells"]}
    jitter, eager = cells["jitter"], cells["eager"]
    assert jitter["status"] == "ok" and not jitter["transient"]
    assert len(jitter["process_samples"]) == 3 and (tmp_path / "counter").read_text() == "xxx"
    assert len(eager["process_samples"]) == 3  # an eager-only process in the extra stretch too
    assert sorted({p["stretch"].split(".")[0] for p in jitter["processes"]}) == ["0", "1", "2"]
    assert "up to 3 for a cell whose speedup interval was still wider" in (tmp_path / "run" / "summary.md").read_text()


def test_max_processes_below_processes_is_a_usage_error(tmp_path):
    proc = run_cli("--backends", "ort", "--workloads", "mlp", "--processes", "3", "--max-processes", "2",
                   "--output-dir", tmp_path / "run")
    assert proc.returncode == 2 and "--max-processes 2 is below --processes 3" in proc.stderr
    assert "Traceback" not in proc.stderr
