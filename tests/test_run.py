"""End to end with real compilers at the small size."""
import csv

import pytest

from conftest import FIXTURES, load_results, run_cli

CELL_FIELDS = {
    "workload", "backend", "status", "error", "compile_s", "compile_phases", "latency", "eager_latency",
    "speedup", "max_abs_err", "max_rel_err", "numerics_ok", "break_even_calls", "peak_rss_mb", "threads",
    "import_s", "torch_import_s", "time_to_first_result_s", "settings", "allocator", "load_mb", "compile_peak_mb",
    "steady_state_mb", "eager_only_ms", "reference_deviation", "numerics_after_timing",
}


# pointwise and attention (the other three run in the IREE, TVM and report tests)
WORKLOADS = ("elementwise_chain", "attention")


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    proc = run_cli("--backends", "inductor,ort", "--workloads", ",".join(WORKLOADS), "--size", "small",
                   "--output-dir", out, "--time-budget", "0.3", "--min-samples", "5", "--threads", "1")
    return out, proc


def test_small_run_measures_every_cell(small_run):
    out, proc = small_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = load_results(out)
    from compare.results.schema import SCHEMA_VERSION

    assert data["schema_version"] == SCHEMA_VERSION
    raw = load_results(out, flat=False)["cells"][0]  # the file keeps the figures beyond the core in sections
    assert raw["memory"]["peak_rss_mb"] > 0 and "peak_rss_mb" not in raw and raw["numerics"]["numerics_ok"] is True
    assert {"environment", "cells", "config"} <= set(data)
    env = data["environment"]
    assert env["threads"] == 1 and env["versions"]["torch"].startswith("2.13.0")
    cells = data["cells"]
    assert len(cells) == 6
    assert {(c["workload"], c["backend"]) for c in cells} == {
        (w, b) for w in WORKLOADS for b in ("eager", "inductor", "ort")
    }
    assert all(c["role"] == ("reference" if c["backend"] == "eager" else "candidate") for c in cells)
    for c in cells:
        assert CELL_FIELDS <= set(c)
        assert c["status"] == "ok", c
        assert c["numerics_ok"] is True, c
        assert c["max_abs_err"] < 1e-4
        assert c["latency"]["median"] > 0 and c["latency"]["n"] >= 5
        assert len(c["latency"]["samples"]) == c["latency"]["n"]
        assert c["threads"] == 1
        assert c["peak_rss_mb"] > 0
        assert c["compile_s"] == pytest.approx(sum(c["compile_phases"].values()))
        # importing the backend is its own phase, outside compile_s, and counts towards the first result
        assert "import" not in c["compile_phases"] and c["import_s"] >= 0
        assert c["time_to_first_result_s"] == pytest.approx(c["torch_import_s"] + c["import_s"] + c["compile_s"])
        # the allocator the run resolved (auto: tcmalloc where installed), as the worker saw it
        assert c["allocator"] == env["allocator"] or (env["allocator"] == "glibc-tuned"
                                                      and c["allocator"].startswith("glibc (MALLOC_MMAP_MAX_=0"))
        assert c["numerics_after_timing"]["ok"] is True
        # one process per cell; the eager-only reference in three, its offset averaged out
        assert len(c["process_samples"]) == (3 if c["backend"] == "eager" else 1)
        assert sum(c["process_samples"]) == c["latency"]["n"]
        assert c["settings"]["threads"] == 1
        if c["backend"] == "eager":
            assert c["speedup"] == 1.0
        else:
            # measured alternately in the same worker: present and consistent
            assert c["eager_latency"]["median"] > 0 and c["import_s"] > 0 and c["load_mb"] is not None
            assert c["speedup"] == pytest.approx(c["eager_latency"]["median"] / c["latency"]["median"])
            assert c["eager_only_ms"] > 0
            assert c["reference_deviation"] == pytest.approx(c["eager_latency"]["median"] / c["eager_only_ms"] - 1)
            lo, hi = c["speedup_ci"]
            if lo > 1:
                assert c["break_even_calls"] == pytest.approx(
                    c["compile_s"] / ((c["eager_latency"]["median"] - c["latency"]["median"]) / 1e3))
            else:
                assert c["break_even_calls"] is None and c["break_even_note"].startswith("never")
    phases = {c["backend"]: set(c["compile_phases"]) for c in cells}
    assert phases["inductor"] == {"trace", "codegen", "first_call"}
    assert phases["ort"] == {"export", "session", "first_call"}
    settings = {c["backend"]: c["settings"] for c in cells}
    assert settings["inductor"]["freezing"] is True and settings["inductor"]["mode"] == "default"
    assert settings["ort"]["graph_optimization_level"] == "ORT_ENABLE_ALL"
    assert settings["ort"]["intra_op_num_threads"] == 1 and settings["ort"]["session.intra_op.allow_spinning"] == "0"
    assert settings["eager"]["no_grad"] is True


def test_small_run_writes_csv_and_summary(small_run):
    out, proc = small_run
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert len(rows) == 6 and rows[0]["latency_ms"]
    summary = (out / "summary.md").read_text()
    assert "| workload" in summary and "break-even calls" in summary
    assert "Eager reference: the in-cell eager medians" in summary and "largest deviation" in summary
    env = load_results(out)["environment"]
    assert f"allocator {env['allocator']}" in summary and "1 worker process(es) per cell" in summary
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


# slow tier (CI runs it): 40 s of the default suite's 15 minutes
@pytest.mark.slow
def test_processes_pool_pairs_from_fresh_workers(tmp_path):
    proc = run_cli("--backends", "ort", "--workloads", "mlp,conv", "--size", "small", "--processes", "2",
                   "--reference-processes", "1", "--time-budget", "0.3", "--min-samples", "4", "--threads", "1",
                   "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    every = load_results(tmp_path)["cells"]
    # Pass by pass: the second process of an mlp cell ran after the first of every conv cell.
    started = {(c["workload"], c["backend"]): [p["started_at"] for p in c["processes"]] for c in every}
    assert started[("mlp", "ort")][1] > max(started[("conv", b)][0] for b in ("eager", "ort"))
    assert not any(c["transient"] for c in every)  # complete: none left for --resume
    cells = {c["backend"]: c for c in every if c["workload"] == "mlp"}
    for cell in cells.values():
        expected = 2  # one process per round for every cell, the reference too (--reference-processes 1)
        assert len(cell["process_samples"]) == expected and len(cell["processes"]) == expected
        assert sum(cell["process_samples"]) == cell["latency"]["n"] == cell["eager_latency"]["n"]
        assert all(p["latency_median_ms"] > 0 for p in cell["processes"])
        for p in cell["processes"]:  # where each process's wall went, by the parent's clock
            assert {"start", "setup", "timing", "after timing"} <= set(p["phase_s"])
            assert sum(p["phase_s"].values()) == pytest.approx(p["wall_s"], abs=0.5)
            assert 0 < p["share_s"] < p["wall_s"]  # its share of the stretch it took turns in
    assert "waiting to compile" in cells["ort"]["processes"][1]["phase_s"]  # a warm pass: imports at once
    lo, hi = cells["ort"]["speedup_ci"]
    assert lo <= cells["ort"]["speedup"] <= hi


def test_outputs_that_change_across_calls_fail_numerics(tmp_path):
    proc = run_cli("--backends", "eager", "--workload-file", FIXTURES / "faulty_workloads.py",
                   "--workloads", "drifts", "--size", "small", "--time-budget", "0.3", "--min-samples", "3",
                   "--output-dir", tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (cell,) = load_results(tmp_path)["cells"]
    assert cell["status"] == "ok" and cell["numerics_ok"] is False
    assert "outputs changed after the timed calls" in cell["numerics_error"]
    assert cell["numerics_after_timing"]["ok"] is False
