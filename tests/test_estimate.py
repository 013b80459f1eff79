"""The run's estimate, said before it starts: from the cells' own past wall times on this CPU."""
import sqlite3

import pytest

from compare.harness.estimate import estimate, past_wall_s
from compare.results.history import record_run
from compare.results.schema import Cell, RunResults

pytestmark = pytest.mark.unit

PLAN = [("bert_base", "eager", None, "fp32"), ("bert_base", "ort", None, "fp32"), ("llama", "ort", 4, "fp32")]


def _record(db, tmp_path, cpu, walls, threads=2):
    cells = [Cell.from_flat(workload=w, backend=b, status="ok", size="default", device="cpu", wall_s=wall, batch=batch)
             for (w, b, batch), wall in walls.items()]
    results = RunResults(environment={"cpu_model": cpu, "threads": threads}, config={}, run_id=f"{cpu}-{len(walls)}",
                         started="2026-12-05T00:00:00", cells=cells)
    record_run(db, results, tmp_path)


def test_a_plan_seen_before_takes_as_long_as_it_took(tmp_path):
    db = tmp_path / "history.sqlite"
    _record(db, tmp_path, "cpu A", {("bert_base", "eager", None): 60.0, ("bert_base", "ort", None): 120.0,
                                    ("llama", "ort", 4): 600.0})
    _record(db, tmp_path, "cpu B", {("bert_base", "eager", None): 1.0})  # another machine: not a basis
    past = past_wall_s(db, "cpu A", 2)
    assert past[("llama[b4]", "ort", "default", "cpu")] == 600.0
    est = estimate(PLAN, "default", "cpu", past, floor_s=3.0)
    assert (est.seconds, est.seen, est.floor_only) == (780.0, 3, False)
    assert est.line() == "estimate: 13 min for 3 cells (3 as long as they took in earlier runs on this CPU)"
    # a new thread count or size is another machine as far as time goes
    assert past_wall_s(db, "cpu A", 1) == {}
    assert estimate(PLAN, "small", "cpu", past, floor_s=3.0).floor_only


def test_unseen_cells_count_at_the_median_and_nothing_seen_says_floor(tmp_path):
    db = tmp_path / "history.sqlite"
    _record(db, tmp_path, "cpu A", {("bert_base", "eager", None): 60.0, ("bert_base", "ort", None): 7200.0})
    est = estimate(PLAN + [("t5", "ort", None, "fp32")], "default", "cpu", past_wall_s(db, "cpu A", 2), floor_s=3.0)
    assert est.seconds == 60.0 + 7200.0 + 2 * 3630.0
    assert "4 h 02 min for 4 cells (2 as long as" in est.line() and "2 never run here, counted at their median 3630 s" in est.line()
    floor = estimate(PLAN, "default", "cpu", {}, floor_s=30.0)
    assert floor.floor_only and floor.line().startswith("estimate: at least 2 min for 3 cells (their timing budgets")
    assert past_wall_s(tmp_path / "none.sqlite", "cpu A", 2) == {}


def test_a_history_from_before_wall_times_gains_the_column(tmp_path):
    db = tmp_path / "old.sqlite"
    con = sqlite3.connect(db)
    con.executescript("CREATE TABLE runs (run_id TEXT PRIMARY KEY, started TEXT, finished TEXT, state TEXT, path TEXT,"
                      " cpu_model TEXT, threads INTEGER, device TEXT, environment TEXT, config TEXT);"
                      "CREATE TABLE cells (run_id TEXT, workload TEXT, backend TEXT, size TEXT, device TEXT, status TEXT,"
                      " latency_ms REAL, eager_latency_ms REAL, speedup REAL, compile_s REAL, max_abs_err REAL,"
                      " numerics_ok INTEGER, peak_rss_mb REAL, cache TEXT, error TEXT,"
                      " PRIMARY KEY (run_id, workload, backend, size, device));")
    con.close()
    assert past_wall_s(db, "cpu A", 2) == {}  # read-only: no column yet, no basis, no error
    _record(db, tmp_path, "cpu A", {("bert_base", "ort", None): 42.0})
    assert past_wall_s(db, "cpu A", 2) == {("bert_base", "ort", "default", "cpu"): 42.0}


def test_cells_never_run_here_count_at_the_reference_runs_times_at_its_thread_count(tmp_path):
    import json

    from compare.harness.estimate import ReferenceWalls, reference_walls

    path = tmp_path / "walls.json"
    path.write_text(json.dumps({"source": "docs/results/x.md", "machine": "cpu Z (AVX-512), 2 threads", "threads": 2,
                                "cells": {"bert_base|eager|default|cpu": 30.0, "bert_base|ort|default|cpu": 90.0}}))
    reference = reference_walls(path)
    assert isinstance(reference, ReferenceWalls) and reference.walls[("bert_base", "ort", "default", "cpu")] == 90.0
    past = {("bert_base", "eager", "default", "cpu"): 50.0}  # this machine's own time wins
    est = estimate(PLAN, "default", "cpu", past, floor_s=3.0, reference=reference, threads=2)
    assert (est.seen, est.from_reference, est.seconds) == (1, 1, 50.0 + 90.0 + 70.0)  # llama[b4]: their median
    assert est.line() == ("estimate: 4 min for 3 cells (1 as long as they took in earlier runs on this CPU; 1 as long "
                          "as in the reference run (cpu Z (AVX-512), 2 threads: docs/results/x.md); 1 never run here, "
                          "counted at their median 70 s)")
    assert estimate(PLAN, "default", "cpu", {}, floor_s=3.0, reference=reference, threads=4).floor_only
    assert reference_walls(tmp_path / "missing.json") is None
    # a reference run of one process per cell, for a run of three: each later process adds its share
    from compare.harness.estimate import LATER_PROCESS_SHARE

    thrice = estimate(PLAN, "default", "cpu", past, floor_s=3.0, reference=reference, threads=2, processes=3)
    scale = 1 + 2 * LATER_PROCESS_SHARE
    assert thrice.seconds == pytest.approx(50.0 + 90.0 * scale + (50.0 + 90.0 * scale) / 2)
    assert f"docs/results/x.md) x {scale:.2f} for this run's processes per cell" in thrice.line()


def test_the_shipped_reference_run_loads():
    from compare.harness.estimate import REFERENCE_FILE, reference_walls

    assert REFERENCE_FILE.exists()
    reference = reference_walls()
    assert reference is not None and reference.walls and reference.source.startswith("docs/results/")


@pytest.mark.unit
def test_the_workers_of_a_stretch_share_its_span_by_their_own_seconds():
    """Each worker's wall spans its whole interleaved stretch: summed, the walls counted the
    stretch once per worker (the main job's 32 min read 3 h 35 min in the next estimate)."""
    from compare.harness.pooling import stretch_shares
    from compare.measure.latency import LatencyStats
    from compare.results.protocol import CellMeasurement

    latency = LatencyStats.from_ms([1.0] * 10, 1)  # 10 rounds of 1 s each: its own sampling
    runs = [CellMeasurement(status="ok", started_at=0.0, wall_s=100.0, round_s=1.0, latency=latency,
                            phase_s={"start": 10.0, "waiting to compile": waited, "compile": compiled,
                                     "timing": 100.0 - 10.0 - waited - compiled})
            for waited, compiled in ((0.0, 30.0), (30.0, 20.0), (50.0, 40.0))]
    shared = stretch_shares([*runs, None])
    assert shared[3] is None
    own = [10 + 30 + 10, 10 + 20 + 10, 10 + 40 + 10]  # start + compile + its own sampling
    assert [r.share_s for r in shared[:3]] == pytest.approx([100.0 * o / sum(own) for o in own], abs=1e-3)
