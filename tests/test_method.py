"""The measurement method's definitions, on synthetic data and fake backends (no compilers)."""
import math

import numpy as np
import pytest

from compare.harness.pooling import pool_processes
from compare.measure.numerics import fp32_verdict, numerics_verdict
from compare.measure.stats import bootstrap_medians, break_even_interval, paired_bootstrap_medians, speedup_interval
from compare.report.text import geomean_rows
from compare.results.derived import fill_derived, reference_spread
from compare.results.protocol import CellMeasurement
from compare.results.schema import Cell, LatencyStats, RunResults

pytestmark = pytest.mark.unit

RNG = np.random.default_rng(7)


def _stats(samples):
    return LatencyStats.from_ms(list(samples), 1)


# ----------------------------------------------------------------------------- paired bootstrap

def test_paired_bootstrap_keeps_the_rounds_together():
    # Both callables share a large drift from round to round (the machine), and the
    # candidate is exactly 2x faster in every round: pairing sees that, unpaired does not.
    drift = RNG.normal(10.0, 2.0, 60)
    ref, cand = drift, drift / 2.0
    ra, rb = paired_bootstrap_medians(ref, cand)
    paired = np.percentile(ra / rb, [2.5, 97.5])
    ua, ub = bootstrap_medians(ref, cand)
    unpaired = np.percentile(ua / ub, [2.5, 97.5])
    assert paired[0] == pytest.approx(2.0) and paired[1] == pytest.approx(2.0)
    assert unpaired[1] - unpaired[0] > 0.3
    lo, hi = speedup_interval(_stats(ref), _stats(cand))
    assert lo == pytest.approx(2.0) and hi == pytest.approx(2.0)


def test_paired_bootstrap_resamples_within_each_process():
    # Two processes at different speed levels: every resample keeps 20 pairs of each.
    ref = np.concatenate([np.full(20, 10.0), np.full(20, 20.0)])
    cand = ref / 2
    ra, _ = paired_bootstrap_medians(ref, cand, groups=[20, 20], resamples=500)
    assert set(np.round(ra, 6)) <= {10.0, 15.0, 20.0}
    assert np.mean(ra == 15.0) > 0.9  # a stratified resample is 20 + 20: its median is in the middle
    with pytest.raises(ValueError, match="do not add up"):
        paired_bootstrap_medians(ref, cand, groups=[10, 20])


def test_break_even_interval_is_never_when_the_speedup_interval_reaches_one():
    ref = RNG.normal(10.0, 1.0, 40)
    same = ref * RNG.normal(1.0, 0.1, 40)
    assert break_even_interval(5.0, _stats(ref), _stats(same)) is None
    faster = ref / 2
    lo, hi = break_even_interval(5.0, _stats(ref), _stats(faster))
    point = 5.0 / ((np.median(ref) - np.median(faster)) / 1e3)
    assert lo <= point <= hi


# ----------------------------------------------------------------------------- derived figures

def _cell(workload, backend, eager_ms, ms, phases=None, tuning_s=None, groups=None, label_batch=None):
    ref = _stats(RNG.normal(eager_ms, eager_ms * 0.01, 30))
    lat = _stats(RNG.normal(ms, ms * 0.01, 30))
    return Cell.from_flat(workload=workload, backend=backend, status="ok", batch=label_batch, latency=lat,
                eager_latency=ref, compile_phases=phases or {"compile": 2.0},
                compile_s=sum((phases or {"compile": 2.0}).values()), tuning_s=tuning_s, numerics_ok=True,
                process_samples=groups)


def test_break_even_counts_the_tuning_behind_a_reused_log():
    reused = _cell("mlp", "tvm", 10.0, 5.0, phases={"build": 2.0, "tune": 0.0}, tuning_s=100.0)
    tuned_now = _cell("mlp", "tvm", 10.0, 5.0, phases={"build": 2.0, "tune": 50.0}, tuning_s=50.0)
    unknown = _cell("mlp", "tvm", 10.0, 5.0, phases={"build": 2.0, "tune": 0.0}, tuning_s=None)
    plain = _cell("mlp", "ort", 10.0, 5.0, phases={"session": 2.0})
    fill_derived(RunResults(environment={}, config={}, cells=[reused, tuned_now, unknown, plain]))
    saved_s = (reused.eager_latency.median - reused.latency.median) / 1e3
    assert reused.costs.break_even_calls == pytest.approx(102.0 / saved_s)
    assert reused.costs.break_even_calls_excl_tuning == pytest.approx(2.0 / saved_s)
    saved_now = (tuned_now.eager_latency.median - tuned_now.latency.median) / 1e3
    assert tuned_now.costs.break_even_calls == pytest.approx(52.0 / saved_now)
    assert unknown.costs.break_even_calls is None and unknown.costs.break_even_note.startswith("unknown")
    assert unknown.costs.break_even_calls_excl_tuning is not None
    assert plain.costs.break_even_calls_excl_tuning is None and plain.costs.break_even_ci is not None


def test_reference_deviation_against_the_eager_only_cell():
    eager = _cell("mlp", "eager", 10.0, 10.0)
    eager.eager_latency = eager.latency
    close = _cell("mlp", "ort", 10.2, 5.0)
    far = _cell("mlp", "tvm", 12.0, 5.0)
    results = RunResults(environment={}, config={}, cells=[eager, close, far])
    fill_derived(results)
    assert close.spread.eager_only_ms == pytest.approx(eager.latency.median)
    assert close.spread.reference_deviation == pytest.approx(close.eager_median_ms / eager.latency.median - 1)
    spread = reference_spread(results)
    assert spread["largest_cell"] == "mlp / tvm" and spread["largest"] == pytest.approx(far.spread.reference_deviation)
    assert len(spread["beyond"]) == 1 and "mlp / tvm" in spread["beyond"][0]


def _stretched(workload, backend, per_stretch_ms, in_cell_eager_ms):
    """A cell timed in one process per stretch, its samples around ``per_stretch_ms``."""
    samples = [x for ms in per_stretch_ms for x in RNG.normal(ms, ms * 0.01, 30)]
    eager = [x for ms in in_cell_eager_ms for x in RNG.normal(ms, ms * 0.01, 30)]
    processes = [{"stretch": str(i), "round_s": 0.01} for i in range(len(per_stretch_ms))]
    return Cell.from_flat(workload=workload, backend=backend, status="ok", latency=_stats(samples),
                          eager_latency=_stats(eager), compile_phases={"compile": 2.0}, compile_s=2.0,
                          numerics_ok=True, process_samples=[30] * len(per_stretch_ms), processes=processes)


def test_a_backend_that_moves_its_in_cell_eager_is_paired_with_the_eager_only_processes():
    # The machine runs 20 % slower in the second stretch, for eager and the backend alike;
    # the backend's worker slows the eager timed beside it by 50 % (a pool left spinning).
    # The check sees the in-cell eager 1.5x the eager-only processes beyond noise, so the
    # speedup is against those, of the same stretches: the true 2x; in-cell it would read 3x.
    eager = _stretched("mlp", "eager", [10.0, 12.0], [10.0, 12.0])
    spinning = _stretched("mlp", "spinning", [5.0, 6.0], [15.0, 18.0])
    fill_derived(RunResults(environment={}, config={}, cells=[eager, spinning]))
    assert spinning.speedup == pytest.approx(2.0, rel=0.03)
    lo, hi = spinning.speedup_ci
    assert lo <= 2.0 <= hi and hi - lo < 0.3
    assert spinning.spread.interval["reference"].startswith("eager-only")
    assert spinning.spread.interval["in_cell_speedup"] == pytest.approx(3.0, rel=0.05)
    assert spinning.spread.speedup_processes == pytest.approx([2.0, 2.0], rel=0.03)
    assert spinning.costs.break_even_calls == pytest.approx(
        2.0 / ((spinning.spread.interval["reference_ms"] - spinning.latency.median) / 1e3))
    assert spinning.spread.reference_deviation == pytest.approx(0.5, rel=0.1)  # still shown, and flagged
    check = spinning.spread.interval["in_cell_check"]
    assert check["moved"] and check["ratio"] == pytest.approx(1.5, rel=0.05) and check["ci"][0] > 1.05


def test_an_in_cell_eager_that_agrees_with_the_eager_only_processes_keeps_its_pairs():
    # No backend moved it: the in-cell pairs (same rounds, same process) are the more precise
    # estimator, and the check that let them stand is recorded beside the interval.
    eager = _stretched("mlp", "eager", [10.0, 12.0], [10.0, 12.0])
    quiet = _stretched("mlp", "ort", [5.0, 6.0], [10.1, 11.9])
    fill_derived(RunResults(environment={}, config={}, cells=[eager, quiet]))
    assert quiet.spread.interval["reference"].startswith("in-cell")
    assert quiet.speedup == pytest.approx(quiet.eager_latency.median / quiet.latency.median)
    check = quiet.spread.interval["in_cell_check"]
    assert not check["moved"] and check["ci"][0] < 1.0 < check["ci"][1] and check["stretches"] == 2


def test_without_stretches_the_speedup_stays_with_the_in_cell_eager():
    # A run that did not interleave (--interleave off, Ray) recorded no stretch: the eager-only
    # cell was timed at another time, so only the in-cell pairs can cancel the drift.
    eager = _cell("mlp", "eager", 10.0, 10.0)
    eager.eager_latency = eager.latency
    ort = _cell("mlp", "ort", 10.0, 5.0)
    fill_derived(RunResults(environment={}, config={}, cells=[eager, ort]))
    assert ort.speedup == pytest.approx(ort.eager_latency.median / ort.latency.median)
    assert ort.spread.interval["reference"].startswith("in-cell")
    # a stretch of the cell without eager-only processes: the same fallback
    lone = _stretched("mlp", "eager", [10.0], [10.0])
    other = _stretched("mlp", "ort", [5.0, 5.0], [10.0, 10.0])
    fill_derived(RunResults(environment={}, config={}, cells=[lone, other]))
    assert other.spread.interval["reference"].startswith("in-cell")


def test_stretch_resampling_keeps_a_stretch_s_two_sides_together():
    from compare.measure.stats import stretch_resample_medians

    # Each side doubles from stretch "0" to "1"; the ratio is 2 in both, so a resample that
    # keeps a stretch's two sides together always reads 2, while one that drew them apart would not.
    ref = {"0": [np.full(20, 10.0)], "1": [np.full(20, 20.0)]}
    cand = {"0": [np.full(20, 5.0)], "1": [np.full(20, 10.0)]}
    ra, rb = stretch_resample_medians(ref, cand, resamples=400)
    assert set(np.round(ra / rb, 6)) == {2.0}
    with pytest.raises(ValueError, match="no stretch"):
        stretch_resample_medians({"0": [np.ones(3)]}, {"1": [np.ones(3)]})


def test_geomean_uses_one_common_set_and_lists_what_it_leaves_out():
    def cell(workload, backend, speedup, status="ok"):
        return Cell.from_flat(workload=workload, backend=backend, status=status, speedup=speedup, numerics_ok=True)

    results = RunResults(environment={}, config={}, cells=[
        cell("a", "x", 2.0), cell("b", "x", 8.0), cell("c", "x", 4.0),
        cell("a", "y", 1.0), cell("b", "y", None, status="failed"), cell("c", "y", 4.0),
        cell("a", "z", None, status="unavailable"), cell("b", "z", None, status="unavailable"),
    ])
    rows = {r["backend"]: r for r in geomean_rows(results)}
    # b is left out for everyone because y failed there; x is not credited with its best cell.
    assert rows["x"]["geomean speedup"] == f"{math.sqrt(2.0 * 4.0):.2f}x"
    assert rows["x"]["common cells"] == 2 and "b (another backend has no figure here)" in rows["x"]["left out"]
    assert rows["y"]["left out"] == "b (failed)"
    # a backend that ran nowhere does not empty the common set
    assert rows["z"]["geomean speedup"] == "-" and rows["z"]["common cells"] == 0


def test_pooling_processes_keeps_the_first_compile_and_every_pair():
    def run(level, compile_s):
        return CellMeasurement(status="ok", latency=_stats(np.full(10, level)), eager_latency=_stats(np.full(10, 2 * level)),
                               compile_s=compile_s, numerics_ok=True, wall_s=1.0)

    pooled = pool_processes([run(1.0, 5.0), run(3.0, 1.0)])
    assert pooled.process_samples == [10, 10] and len(pooled.processes) == 2
    assert pooled.compile_s == 5.0 and pooled.latency.n == 20 and pooled.wall_s == 2.0
    failed = pool_processes([run(1.0, 5.0), CellMeasurement(status="failed", error="boom")])
    assert failed.status == "failed" and failed.error == "process 2: boom"


# ----------------------------------------------------------------------------- numerics

def test_fp32_cell_closer_to_float64_than_eager_passes():
    beyond = {"ok": False, "error": "differs", "max_abs": 1e-3, "tolerance": {"rtol": 1e-4, "atol": 1e-4}}
    assert fp32_verdict(beyond, {"max_abs": 1e-6, "error": None}, {"max_abs": 1e-3})["ok"]
    assert not fp32_verdict(beyond, {"max_abs": 1e-2, "error": None}, {"max_abs": 1e-3})["ok"]
    nonfinite = {"max_abs": math.inf, "error": "non-finite"}
    assert not fp32_verdict(beyond, nonfinite, {"max_abs": 1e-3})["ok"]


def test_reduced_precision_is_judged_per_draw():
    # Draw 1: the backend's error is 5x eager's (fails). Draw 2: eager is much worse.
    # The worst over draws (5 vs 10) would pass; each draw on its own does not.
    draw1 = {"vs_eager": {}, "vs_fp64": {"max_abs": 5e-2}, "eager_vs_fp64": {"max_abs": 1e-2}}
    draw2 = {"vs_eager": {}, "vs_fp64": {"max_abs": 3e-2}, "eager_vs_fp64": {"max_abs": 1e-1}}
    assert not numerics_verdict("bf16", draw1, 0.0)["ok"]
    assert numerics_verdict("bf16", draw2, 0.0)["ok"]


def test_position_split_sees_a_neighbour_effect():
    from compare.report.reference import position_split

    # ABBA: eager (A) follows the backend at odd rounds; those samples are 20 % slower.
    eager = [12.0 if i % 2 == 1 else 10.0 for i in range(40)]
    after_self, after_other = position_split(eager, first=True)
    assert after_self == 10.0 and after_other == 12.0
    # the backend (B) follows eager at even rounds
    backend = [6.0 if i % 2 == 0 else 5.0 for i in range(40)]
    assert position_split(backend, first=False) == (5.0, 6.0)


def test_reference_command_tables(tmp_path):
    from compare.report.reference import deviation_frame, load_runs, summary_frame
    from compare.results.schema import atomic_write_json

    eager = _cell("mlp", "eager", 10.0, 10.0)
    eager.eager_latency = eager.latency
    results = RunResults(environment={"allocator": "system"}, config={"processes": 2, "thread_spin": "short"},
                         cells=[eager, _cell("mlp", "ort", 11.0, 5.0)])
    atomic_write_json(tmp_path / "r1" / "results.json", results.to_dict())
    runs = load_runs([str(tmp_path / "r1")])
    (row,) = summary_frame(runs).to_dict("records")
    assert row["processes"] == 2 and row["allocator"] == "system" and row["beyond ±5%"] == 1
    assert deviation_frame(runs).to_dict("records")[0]["r1"].startswith("+")
