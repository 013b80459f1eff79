"""report.html in a real browser, diff verdicts, and a crash-safe history."""
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

from compare.measure.stats import summarize
from compare.report.diff import diff_cells, geomeans, latency_verdict
from compare.results.history import list_runs
from compare.results.schema import Cell, RunResults, atomic_write_json
from conftest import FAST, ROOT, run_cli

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _run(samples_by_cell, run_id, compile_s=1.0, env=None):
    cells = []
    for (workload, backend), samples in samples_by_cell.items():
        stats = summarize([s / 1e3 for s in samples], number=1)
        cells.append(Cell.from_flat(workload=workload, backend=backend, status="ok", latency=stats, compile_s=compile_s,
                          speedup=1.0, max_abs_err=1e-7, numerics_ok=True))
    return RunResults(environment=env or {"cpu_model": "cpu", "threads": 2, "versions": {"torch": "2.13.0"}},
                      config={}, cells=cells, run_id=run_id, started=run_id)


RNG = np.random.default_rng(0)


@pytest.mark.unit
def test_identical_samples_are_unchanged():
    s = list(RNG.normal(10, 0.3, 40))
    assert latency_verdict(s, list(s))[2] == "unchanged"


@pytest.mark.unit
def test_clear_shifts_are_slower_or_faster():
    base = list(RNG.normal(10, 0.2, 40))
    assert latency_verdict(base, list(RNG.normal(12, 0.2, 40)))[2] == "slower"
    assert latency_verdict(base, list(RNG.normal(8, 0.2, 40)))[2] == "faster"


@pytest.mark.unit
def test_overlapping_noisy_samples_are_unchanged():
    base = list(RNG.normal(10, 3.0, 15))
    new = list(RNG.normal(10.3, 3.0, 15))
    ratio, (lo, hi), verdict = latency_verdict(base, new)
    assert verdict == "unchanged" and lo < 1 < hi


@pytest.mark.unit
def test_geomean_counts_slowdowns():
    base = _run({("a", "x"): RNG.normal(10, 0.1, 30), ("b", "x"): RNG.normal(10, 0.1, 30)}, "r1")
    new = _run({("a", "x"): RNG.normal(20, 0.1, 30), ("b", "x"): RNG.normal(5, 0.1, 30)}, "r2")
    gm = geomeans(diff_cells(base, new))
    assert gm["x"]["geomean_ratio"] == pytest.approx(1.0, rel=0.02)  # 2x slower and 2x faster cancel


def test_diff_command_and_fail_on_regression(tmp_path):
    base = _run({("mlp", "inductor"): RNG.normal(10, 0.1, 30), ("conv", "inductor"): RNG.normal(5, 0.1, 30)}, "base")
    new = _run({("mlp", "inductor"): RNG.normal(13, 0.1, 30), ("conv", "inductor"): RNG.normal(5, 0.1, 30)}, "new",
               env={"cpu_model": "other cpu", "threads": 2, "versions": {"torch": "2.13.0"}})
    for name, res in (("base", base), ("new", new)):
        atomic_write_json(tmp_path / name / "results.json", res.to_dict())
    ok = run_cli("diff", tmp_path / "base", tmp_path / "new")
    assert ok.returncode == 0, ok.stderr
    assert "slower" in ok.stdout and "environment differs" in ok.stdout and "other cpu" in ok.stdout
    text = (tmp_path / "new" / "diff.md").read_text()
    assert "environments differ" in text and "| mlp" in text
    assert (tmp_path / "new" / "diff.html").exists()
    assert run_cli("diff", tmp_path / "base", tmp_path / "new", "--fail-on-regression", "10").returncode == 1
    assert run_cli("diff", tmp_path / "base", tmp_path / "new", "--fail-on-regression", "50").returncode == 0


HISTORY_WRITER = """
import sys
sys.path.insert(0, {root!r})
from compare.results.schema import Cell, RunResults
from compare.results.history import record_run
i = 0
while True:
    res = RunResults(environment={{"cpu_model": "c", "threads": 1}}, config={{}}, run_id="run%06d" % i,
                     started="%06d" % i, cells=[Cell.from_flat(workload="w", backend="b", status="ok", speedup=float(i))])
    record_run({db!r}, res, ".")
    i += 1
"""


def test_history_survives_a_kill_between_writes(tmp_path):
    db = tmp_path / "history.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", HISTORY_WRITER.format(root=str(ROOT), db=str(db))])
    deadline = time.time() + 60
    while time.time() < deadline:
        time.sleep(0.3)
        try:
            if len(list_runs(db)) >= 20:
                break
        except sqlite3.Error:
            pass
    proc.send_signal(signal.SIGKILL)  # mid-write, most likely: it writes in a tight loop
    proc.wait()
    con = sqlite3.connect(str(db))
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    runs = con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()
    cells = con.execute("SELECT COUNT(*) FROM cells").fetchone()[0]
    con.close()
    assert len(runs) >= 20 and runs[0][0] == "run000000"
    assert cells == len(runs)  # every committed run has its cell: no half-written run


@pytest.fixture(scope="module")
def small_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "run"
    proc = run_cli("--backends", "inductor,ort", "--workloads", "mlp", "--size", "small",
                   *FAST, "--roofline", "--output-dir", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_run_writes_report_and_history(small_report):
    assert (small_report / "report.html").stat().st_size > 10_000
    runs = list_runs(small_report.parent / "history.sqlite")
    assert len(runs) == 1 and runs[0]["cells"] == 3 and runs[0]["ok"] == 3
    listed = run_cli("history", "--db", small_report.parent / "history.sqlite")
    assert listed.returncode == 0 and runs[0]["run_id"] in listed.stdout
    one = run_cli("history", "--db", small_report.parent / "history.sqlite", "--workload", "mlp", "--backend", "ort")
    assert one.returncode == 0 and "mlp / ort" in one.stdout


def test_report_command_regenerates_from_results_only(small_report, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(small_report / "results.json", copy / "results.json")
    proc = run_cli("report", copy)
    assert proc.returncode == 0, proc.stderr
    assert (copy / "report.html").exists() and (copy / "summary.md").exists()


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_report_opens_in_headless_chromium(small_report, tmp_path):
    url = (small_report / "report.html").resolve().as_uri()
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(flags + ["--virtual-time-budget=5000", "--dump-dom", url],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    import re

    images = re.search(r'data-images="(\d+)/(\d+)"', dom.stdout)
    errors = re.search(r'data-errors="(\d+)"', dom.stdout)
    assert images and errors, dom.stdout[:2000]
    good, total = int(images.group(1)), int(images.group(2))
    assert total >= 5 and good == total  # every plot decoded by the browser
    assert errors.group(1) == "0"
    shot = tmp_path / "shot.png"
    subprocess.run(flags + ["--window-size=1280,2000", f"--screenshot={shot}", url],
                   capture_output=True, text=True, timeout=120)
    import matplotlib.image as mpimg

    pixels = mpimg.imread(str(shot))
    assert pixels.shape[0] > 100 and float(pixels[..., :3].std()) > 0.01  # not blank


@pytest.mark.unit
def test_tuning_curves_draw_eager_and_the_best_backend(monkeypatch):
    from compare.report import html as html_report

    autotuned = "inductor:inductor-mode=max-autotune"
    run = _run({("mlp", "eager"): [10.0] * 5, ("mlp", "ort"): [6.0] * 5, ("mlp", "tvm"): [8.0] * 5,
                ("mlp", autotuned): [7.0] * 5}, "r")
    next(c for c in run.cells if c.backend == autotuned).costs.tuning_s = 11.0
    tvm = next(c for c in run.cells if c.backend == "tvm")
    tvm.conditions.info = {"tuning": {"curve": [{"s": 5.0, "trials": 8, "estimated_ms": None},
                                     {"s": 9.0, "trials": 16, "estimated_ms": 12.0},
                                     {"s": 14.0, "trials": 24, "estimated_ms": 7.5}]}}
    drawn = {}

    def keep(fig):
        drawn["axes"] = fig.axes
        return "data:image/png;base64,"
    monkeypatch.setattr(html_report, "_figure_to_data_uri", keep)
    assert html_report.plot_tuning_curves(run)
    by_trials, by_seconds = drawn["axes"]
    assert by_trials.get_xlabel() == "trials measured" and by_seconds.get_xlabel() == "tuning seconds"
    lines = {line.get_label(): line for line in by_trials.get_lines()}
    assert list(lines["the tuner's estimate (kernels only)"].get_xdata()) == [16, 24]
    assert list(lines["eager"].get_ydata()) == [10.0, 10.0]
    assert list(lines["best other: ort"].get_ydata()) == [6.0, 6.0]
    assert list(lines["tvm measured"].get_xdata()) == [24]
    # max-autotune: a point at its autotuning seconds and its measured latency, on the seconds panel only
    point = {line.get_label(): line for line in by_seconds.get_lines()}[f"{autotuned} (its tuning s)"]
    assert list(point.get_xdata()) == [11.0] and list(point.get_ydata()) == [7.0]
    assert f"{autotuned} (its tuning s)" not in lines


@pytest.mark.unit
def test_the_conditions_name_the_backends_that_pinned_their_threads():
    from compare.report.text import conditions_line

    res = _run({("a", "openvino"): [1.0] * 5, ("b", "openvino"): [1.0] * 5, ("a", "ort"): [1.0] * 5}, "r1")
    assert "pinned by the backend" not in conditions_line(res)  # a run that did not record it says nothing
    pinning = {("a", "openvino"): 1, ("b", "openvino"): 2, ("a", "ort"): 0}
    for cell in res.cells:
        cell.conditions.info = {"thread_pinning": {"threads": 4, "pinned": pinning[(cell.workload, cell.backend)]}}
    assert conditions_line(res).endswith("threads pinned by the backend itself: openvino (2 of 4 threads)")
    for cell in res.cells:
        cell.conditions.info["thread_pinning"]["pinned"] = 0
    assert conditions_line(res).endswith("threads pinned by the backend itself: none")
