"""End to end with real compilers at the small size."""
import csv

import pytest

from conftest import load_results, run_cli

CELL_FIELDS = {
    "workload", "backend", "status", "error", "compile_s", "compile_phases", "latency_ms", "eager_latency_ms",
    "speedup", "max_abs_err", "max_rel_err", "numerics_ok", "break_even_calls", "peak_rss_mb", "threads",
}


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    proc = run_cli("--backends", "inductor,ort", "--size", "small", "--output-dir", out,
                   "--time-budget", "0.5", "--min-samples", "5", "--threads", "1")
    return out, proc


def test_small_run_measures_every_cell(small_run):
    out, proc = small_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = load_results(out)
    assert data["schema_version"] == 1
    assert {"environment", "cells", "config"} <= set(data)
    env = data["environment"]
    assert env["threads"] == 1 and env["versions"]["torch"].startswith("2.13.0")
    cells = data["cells"]
    assert len(cells) == 15
    assert {(c["workload"], c["backend"]) for c in cells} == {
        (w, b) for w in ("elementwise_chain", "norm_residual", "conv", "mlp", "attention")
        for b in ("eager", "inductor", "ort")
    }
    for c in cells:
        assert CELL_FIELDS <= set(c)
        assert c["status"] == "ok", c
        assert c["numerics_ok"] is True, c
        assert c["max_abs_err"] < 1e-4
        assert c["latency_ms"]["median"] > 0 and c["latency_ms"]["n"] >= 5
        assert len(c["latency_ms"]["samples"]) == c["latency_ms"]["n"]
        assert c["threads"] == 1
        assert c["peak_rss_mb"] > 0
        assert c["compile_s"] == pytest.approx(sum(c["compile_phases"].values()))
        if c["backend"] == "eager":
            assert c["speedup"] == 1.0
        else:
            # measured alternately in the same worker: present and consistent
            assert c["eager_latency_ms"] > 0
            assert c["speedup"] == pytest.approx(c["eager_latency_ms"] / c["latency_ms"]["median"])
            if c["speedup"] > 1:
                assert c["break_even_calls"] == pytest.approx(
                    c["compile_s"] / ((c["eager_latency_ms"] - c["latency_ms"]["median"]) / 1e3))
            else:
                assert c["break_even_calls"] is None
    phases = {c["backend"]: set(c["compile_phases"]) for c in cells}
    assert phases["inductor"] == {"trace", "codegen", "first_call"}
    assert phases["ort"] == {"export", "session", "first_call"}


def test_small_run_writes_csv_and_summary(small_run):
    out, proc = small_run
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert len(rows) == 15 and rows[0]["latency_ms"]
    summary = (out / "summary.md").read_text()
    assert "| workload" in summary and "break-even calls" in summary
    for w in ("elementwise_chain", "attention"):
        assert w in summary
    # the terminal table
    assert "speedup" in proc.stdout and "results:" in proc.stdout


def test_report_regenerates_tables(small_run, tmp_path):
    out, _ = small_run
    (out / "summary.md").unlink()
    proc = run_cli("report", out)
    assert proc.returncode == 0, proc.stderr
    assert "elementwise_chain" in (out / "summary.md").read_text()
