"""Every report is written whatever the data: non-finite figures, no cells, one cell, every
cell failed (issue 43: a NaN workload lost report.html to a log axis)."""
import math

import numpy as np
import pytest

from compare.measure.stats import summarize
from compare.report import html
from compare.report.outputs import write_outputs
from compare.results.derived import fill_derived
from compare.results.schema import Cell, RunResults
from conftest import FAST, FIXTURES, load_results, run_cli

RNG = np.random.default_rng(0)


def _stats(ms: float):
    return summarize([s / 1e3 for s in RNG.normal(ms, ms * 0.02, 40)], number=1)


def _ok(workload, backend, ms, err):
    eager = _stats(2.0)
    return Cell.from_flat(workload=workload, backend=backend, status="ok", latency=_stats(ms), eager_latency=eager,
                compile_s=0.5, compile_phases={"compile": 0.5}, max_abs_err=err, numerics_ok=math.isfinite(err) and err < 1e-4,
                threads=2, process_samples=[40])


def _failed(workload, backend, status="failed"):
    return Cell.from_flat(workload=workload, backend=backend, status=status, error=f"{backend} broke on {workload}")


def _results(cells) -> RunResults:
    results = RunResults(environment={"cpu_model": "cpu", "threads": 2, "versions": {"torch": "2.13.0"}},
                         config={"threads": 2}, cells=cells, run_id="shapes", started="shapes")
    fill_derived(results)
    return results


SHAPES = {
    "non-finite": lambda: [_ok("nan", "eager", 2.0, 0.0), _ok("nan", "ort", 1.0, math.nan),
                           _ok("nan", "inductor", 1.5, math.inf)],
    "every figure NaN": lambda: [_ok("nan", "eager", 2.0, 0.0), _ok("nan", "ort", math.nan, math.nan)],
    "empty": lambda: [],
    "single cell": lambda: [_ok("mlp", "eager", 2.0, 0.0)],
    "all failed": lambda: [_failed("mlp", "eager"), _failed("mlp", "ort"), _failed("conv", "ort", "timeout"),
                           _failed("conv", "inductor", "out_of_memory")],
}


@pytest.mark.unit
@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_of_data_writes_every_report(tmp_path, shape):
    results = _results(SHAPES[shape]())
    write_outputs(results, tmp_path, reports=True)
    page = (tmp_path / "report.html").read_text()
    assert "<html" in page and "not drawn" not in page  # the data itself draws, or the plot is left out
    assert (tmp_path / "summary.md").read_text().strip()
    assert (tmp_path / "results.csv").exists()
    for cell in results.cells:  # every cell is in both tables, failed or not
        assert cell.workload in page and cell.backend in (tmp_path / "summary.md").read_text()


@pytest.mark.unit
def test_a_plot_that_raises_costs_only_itself(tmp_path, monkeypatch):
    def broken(results):
        raise ValueError("Data cannot be log-scaled\nsecond line")

    monkeypatch.setattr(html, "PLOTS", [("Broken plot", broken), *html.PLOTS])
    write_outputs(_results(SHAPES["non-finite"]()), tmp_path, reports=True)
    page = (tmp_path / "report.html").read_text()
    assert "Broken plot: not drawn (ValueError: Data cannot be log-scaled)" in page
    assert "Speedup vs eager" in page  # the other plots are still there


def test_a_nan_workload_writes_its_html_report(tmp_path):
    """The run as issue 43 found it: a workload whose outputs are NaN, through a compiler."""
    proc = run_cli("--backends", "ort", "--workload-file", FIXTURES / "faulty_workloads.py", "--workloads", "makes_nan",
                   "--size", "small", *FAST, "--output-dir", tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the cell is flagged: its numerics cannot agree
    assert "report not written" not in proc.stdout + proc.stderr
    assert (tmp_path / "report.html").exists() and (tmp_path / "summary.md").exists()
    cell = next(c for c in load_results(tmp_path)["cells"] if c["backend"] == "ort")
    assert cell["numerics_ok"] is not True
