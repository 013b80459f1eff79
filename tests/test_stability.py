"""Intervals that count processes: the hierarchical bootstrap, the process plan of a cell,
the calibration of two runs, and the machine probe in the header (synthetic data)."""
import numpy as np
import pytest

from compare.experiments import noise
from compare.harness.pooling import ProcessPlan, pool_processes, process_timing
from compare.measure.stats import (
    block_indices,
    block_rounds,
    hierarchical_resample_medians,
    process_speedups,
    speedup_interval,
)
from compare.measure.timing import TimingConfig
from compare.report import stability
from compare.report.text import noise_line, summary_markdown
from compare.results.derived import fill_derived
from compare.results.protocol import CellMeasurement
from compare.results.schema import Cell, LatencyStats, RunResults, atomic_write_json
from conftest import tiny_spec

pytestmark = pytest.mark.unit

RNG = np.random.default_rng(11)


def _stats(samples):
    return LatencyStats.from_ms(list(samples), 1)


def _processes(levels, per=30, noise_sd=0.01):
    """Eager at 10 ms in every process; the backend at 5 ms times each process's level."""
    ref = np.concatenate([RNG.normal(10.0, 10.0 * noise_sd, per) for _ in levels])
    cand = np.concatenate([RNG.normal(5.0 * level, 5.0 * noise_sd, per) for level in levels])
    return _stats(ref), _stats(cand), [per] * len(levels)


def test_the_interval_widens_when_the_processes_disagree():
    ref, agree, groups = _processes([1.0, 1.0, 1.0])
    _, disagree, _ = _processes([0.9, 1.0, 1.1])
    lo_a, hi_a = speedup_interval(ref, agree, groups)
    lo_d, hi_d = speedup_interval(ref, disagree, groups)
    assert (hi_d - lo_d) > 5 * (hi_a - lo_a)
    # Each process's own speedup lies inside: the next run's processes are drawn from the same spread.
    for value in process_speedups(ref, disagree, groups):
        assert lo_d <= value <= hi_d
    # Pairs resampled within the processes alone (the interval before) hide the disagreement.
    flat_lo, flat_hi = speedup_interval(ref, disagree)  # one group: all samples as one process
    assert (flat_hi - flat_lo) < (hi_d - lo_d) / 2


def test_resampling_keeps_whole_processes_and_blocks_of_rounds():
    ref = np.concatenate([np.full(10, 10.0), np.full(10, 20.0)])
    ra, _ = hierarchical_resample_medians(ref, ref / 2, [10, 10], resamples=400)
    # A resample takes two processes with replacement: both slow, both fast, or one of each.
    assert set(np.round(ra, 6)) <= {10.0, 15.0, 20.0} and {10.0, 20.0} <= set(np.round(ra, 6))
    index = block_indices(np.random.default_rng(0), 12, 4, 50)
    assert index.shape == (50, 12)
    steps = np.diff(index.reshape(50, 3, 4), axis=2) % 12
    assert (steps == 1).all()  # each block is 4 consecutive rounds (circular)
    with pytest.raises(ValueError, match="do not add up"):
        hierarchical_resample_medians(ref, ref, [5, 10])


def test_a_block_lasts_the_correlation_time():
    assert block_rounds(None, 0.05) == 1 and block_rounds(0.4, 0.05) == 8


def test_a_cell_records_its_interval_plan_and_process_spread():
    ref, cand, groups = _processes([0.95, 1.0, 1.05])
    cell = Cell.from_flat(workload="mlp", backend="ort", status="ok", latency=cand, eager_latency=ref, process_samples=groups,
                processes=[{"round_s": 0.05}] * 3, compile_s=1.0)
    results = RunResults(environment={}, config={}, cells=[cell],
                         experiments={"noise_probe": {"before": {"correlation_s": 0.4}}})
    fill_derived(results)
    assert cell.spread.interval["processes"] == 3 and cell.spread.interval["block_rounds"] == 8
    assert cell.spread.interval["tail"] == 0.025  # a plain 95 % percentile interval
    assert len(cell.spread.speedup_processes) == 3
    assert cell.noisy is (cell.speedup_ci[1] - cell.speedup_ci[0] > 0.1 * cell.speedup)


def test_the_process_plan_shares_one_compile_and_one_timing_budget(tmp_path):
    timing = {"budget_s": 9.0, "min_samples": 10, "max_samples": 300}
    share = process_timing(TimingConfig(**timing), 3)
    assert share.budget_s == 3.0 and share.max_samples == 100
    assert share.target_rel_se == pytest.approx(0.005 * 3 ** 0.5)
    spec = tiny_spec("eager", tmp_path, cache="cold", explain=True, timing=timing)
    plan = ProcessPlan(3, "/tmp/store")
    first, later = plan.spec(spec, 0), plan.spec(spec, 2)
    assert first.cache == later.cache == "warm" and first.store_root == later.store_root == "/tmp/store"
    assert first.fresh_store and not later.fresh_store and first.timing == later.timing == share
    assert first.explain and not later.explain and later.count_work is False
    assert ProcessPlan(1).spec(spec, 0).cache == "cold"


def test_pooling_gives_the_warm_start_of_the_later_processes():
    def run(compile_s, cache):
        stats = _stats([1.0] * 4)
        return CellMeasurement(status="ok", latency=stats, eager_latency=stats, compile_s=compile_s, cache=cache,
                               numerics_ok=True, round_s=0.02)
    pooled = pool_processes([run(20.0, "cold"), run(0.4, "hit"), run(0.6, "hit")])
    assert pooled.warm_start_s == 0.5 and pooled.warm_cache == "hit"
    assert [p["cache"] for p in pooled.processes] == ["cold", "hit", "hit"]
    assert pool_processes([run(2.0, "hit"), run(2.0, "hit")]).warm_start_s is None  # a warm run: all load


def _run(values):
    cells = [Cell.from_flat(workload=w, backend="ort", status="ok", speedup=v, speedup_ci=ci) for w, (v, ci) in values.items()]
    return RunResults(environment={}, config={}, cells=cells, run_id="r")


def test_calibration_figures_of_two_runs():
    a = _run({"mlp": (1.00, [0.95, 1.05]), "conv": (2.00, [1.90, 2.10]), "attention": (1.50, [1.45, 1.55])})
    b = _run({"mlp": (1.02, [0.98, 1.06]), "conv": (2.15, [2.08, 2.22]), "attention": (1.80, [1.70, 1.90])})
    figures = stability.calibration(stability.pairs(a, b))
    assert figures["cells"] == 3
    assert figures["b_in_a"] == pytest.approx(1 / 3) and figures["a_in_b"] == pytest.approx(1 / 3)
    assert figures["overlap"] == pytest.approx(2 / 3)  # mlp and conv overlap; attention does not
    assert figures["median_half_width"] == pytest.approx((0.08 / 2 / 1.02 + 0.05) / 2)
    text = stability.markdown(a, b, stability.pairs(a, b))
    assert "inside the other run's 95% interval" in text and "about 83%" in text and "about 99%" in text


def test_single_stream_runs_also_check_the_p99_speedup():
    def tails(values):
        run = _run({w: (1.5, [1.4, 1.6]) for w in values})
        for cell in run.cells:
            cell.scenario.tail_speedup = {"q": 99.0, "ratio": values[cell.workload][0], "ci": values[cell.workload][1]}
        return run

    a = tails({"mlp": (2.00, [1.53, 2.68]), "conv": (1.09, [1.00, 1.20])})
    b = tails({"mlp": (1.63, [1.43, 2.02]), "conv": (0.98, [0.85, 1.24])})
    found = stability.pairs(a, b, stability.tail_figure)
    assert [(p.a, p.b_in_a, p.a_in_b) for p in found] == [(2.00, True, True), (1.09, False, True)]
    text = stability.markdown(a, b, stability.pairs(a, b))
    assert "## p99 speedup" in text and "2 cells: 75% of p99 speedups inside" in text
    assert "p99" not in stability.markdown(a, a.__class__(environment={}, config={}, cells=[], run_id="r"), [])


def test_the_probe_measures_and_the_header_shows_it():
    probe = noise.machine_probe(0.5)
    assert probe["compute_ns_per_element"]["median"] > 0 and probe["copy_gb_s"]["median"] > 0
    assert probe["correlation_s"] >= 0.2  # at least one lag of two windows
    assert probe["other_cores"] >= 0.0
    after = dict(probe, copy_gb_s=dict(probe["copy_gb_s"], median=probe["copy_gb_s"]["median"] * 0.9))
    results = RunResults(environment={}, config={}, experiments={"noise_probe": {"before": probe, "after": after}})
    line = noise_line(results)
    assert "compute loop" in line and "memory copy" in line and "copy bandwidth -10.0%" in line
    assert "correlation time" in line and line in summary_markdown(results)
    assert noise_line(RunResults(environment={}, config={})) is None


def test_a_probe_that_finds_other_processes_busy_says_the_machine_was_not_quiet():
    # Under a neighbour taking both cores, eager's 2-thread regions on mlp small read 0.059 or
    # 2.6 ms a call, process by process (libgomp's barrier waits for a descheduled thread).
    quiet = {"compute_ns_per_element": {"median": 0.4, "p5": -0.01, "p95": 0.01},
             "copy_gb_s": {"median": 25.0, "p5": -0.05, "p95": 0.05}, "other_cores": 0.02}
    busy = dict(quiet, other_cores=1.6)

    def line(before, after):
        return noise_line(RunResults(environment={"cores": 2}, config={},
                                     experiments={"noise_probe": {"before": before, "after": after}}))
    assert "Not a quiet machine" not in line(quiet, quiet)
    assert "other processes kept 1.6 of 2 cores busy during a probe" in line(quiet, busy)


def test_correlation_time_of_a_slow_swing():
    slow = [float(np.sin(i / 10)) for i in range(60)]
    seconds, bound = noise._correlation_s(slow, 0.2)
    assert seconds >= 1.0 and not bound
    white = list(np.random.default_rng(3).normal(size=60))
    assert noise._correlation_s(white, 0.2)[0] <= 0.4


def test_affinity_is_parsed_and_checked(tmp_path):
    import os

    from compare import cli
    from compare.harness.run_config import cpu_list

    assert cpu_list("0-2,5,1") == [0, 1, 2, 5]
    allowed = sorted(os.sched_getaffinity(0))
    config = cli.make_config(cli.parse(["--backends", "ort", "--affinity", str(allowed[0]), "--output-dir", str(tmp_path)]))
    assert config.affinity == [allowed[0]] and config.threads == 1  # threads follow the pinned CPUs
    with pytest.raises(cli.UsageError, match="not available here"):
        cli.make_config(cli.parse(["--affinity", str(max(allowed) + 64), "--output-dir", str(tmp_path)]))
    with pytest.raises(cli.UsageError, match="CPU"):
        cli.parse(["--affinity", "a-b"])


def test_system_reports_what_raises_noise():
    from compare.experiments import system

    found = {c.name: c for c in system.checks(seconds=0.1)}
    assert {"frequency governor", "SMT siblings", "transparent huge pages", "steal time", "load average",
            "other busy processes", "virtual machine"} <= set(found)
    assert all(c.verdict in ("ok", "noise", "-") for c in found.values())


def test_a_version_5_interval_is_recomputed_on_load(tmp_path):
    ref, cand, groups = _processes([0.95, 1.0, 1.05])
    cell = Cell.from_flat(workload="mlp", backend="ort", status="ok", latency=cand, eager_latency=ref, process_samples=groups,
                speedup_ci=[0.1, 9.0], interval={"tail": 0.005}, compile_s=1.0)
    data = RunResults(environment={}, config={}, cells=[cell]).to_dict()
    data["schema_version"] = 5
    atomic_write_json(tmp_path / "results.json", data)
    back = RunResults.load(tmp_path)
    fill_derived(back)
    assert back.cells[0].speedup_ci != [0.1, 9.0] and back.cells[0].spread.interval["tail"] == 0.025


def test_decode_runs_also_check_each_rate_speedup():
    # The LLM suite's figures are pp and tg tokens/s over eager's (issue 56: back to back at pp512/tg128).
    def rates(values):
        run = _run({w: (1.5, [1.4, 1.6]) for w in values})
        for cell in run.cells:
            pp, tg = values[cell.workload]
            cell.scenario.decode = {"pp_speedup": {"value": pp[0], "ci": pp[1]},
                                    "tg_speedup": {"value": tg[0], "ci": tg[1]}}
        return run

    a = rates({"llama_decode": ((1.00, [0.95, 1.05]), (1.70, [1.65, 1.75]))})
    b = rates({"llama_decode": ((1.02, [0.97, 1.07]), (1.80, [1.76, 1.84]))})
    found = stability.pairs(a, b, stability.rate_figure("tg"))
    assert [(p.a, p.b, p.b_in_a, p.overlap) for p in found] == [(1.70, 1.80, False, False)]
    text = stability.markdown(a, b, stability.pairs(a, b))
    assert "## pp tokens/s over eager's" in text and "1 cells: 100% of pp speedups inside" in text
    assert "## tg tokens/s over eager's" in text and "1 cells: 0% of tg speedups inside" in text
