"""A crash, a kill or a hang costs only its own cell."""

from conftest import FIXTURES, load_results, run_cli


def test_failures_are_isolated_and_everything_is_saved(tmp_path):
    out = tmp_path / "run"
    proc = run_cli(
        "--backends", "eager", "--workload-file", FIXTURES / "faulty_workloads.py",
        "--workloads", "raises,kills_itself,hangs,fine", "--size", "small",
        "--timeout", "15", "--output-dir", out, "--time-budget", "0.3", "--min-samples", "3",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    cells = {c["workload"]: c for c in load_results(out)["cells"]}
    assert set(cells) == {"raises", "kills_itself", "hangs", "fine"}
    assert cells["raises"]["status"] == "failed"
    assert "this workload always raises" in cells["raises"]["error"]
    assert cells["kills_itself"]["status"] == "failed"
    assert "SIGKILL" in cells["kills_itself"]["error"]
    assert cells["hangs"]["status"] == "timeout"
    assert "15 s" in cells["hangs"]["error"]
    assert cells["fine"]["status"] == "ok" and cells["fine"]["numerics_ok"] is True
    # the log of the failed cell holds the traceback, the error line does not
    log = (out / cells["raises"]["log"]).read_text()
    assert "Traceback" in log
    summary = (out / "summary.md").read_text()
    assert "## Problems" in summary and "timeout" in summary
