"""--scenario single-stream: every request timed on its own, with per-request percentiles."""
import pytest

from compare.measure.stats import request_percentiles, tail_speedup
from compare.measure.timing import AlternatingSampler, Timed, TimingConfig
from conftest import load_results, run_cli


@pytest.mark.unit
def test_percentiles_are_observed_requests_from_known_times():
    times = [float(ms) for ms in range(1000, 0, -1)]  # 1..1000 ms, in any order
    assert request_percentiles(times) == {"n": 1000, "max": 1000.0, "p50": 500.0, "p90": 900.0, "p99": 990.0,
                                          "p99.9": 999.0}
    # one slow request in 100: p99 is still a fast one, the max shows the slow one
    assert request_percentiles([1.0] * 99 + [50.0]) == {"n": 100, "max": 50.0, "p50": 1.0, "p90": 1.0,
                                                        "p99": 1.0, "p99.9": None}


@pytest.mark.unit
def test_a_tail_needs_enough_requests():
    few = request_percentiles([2.0] * 99)
    assert few["p90"] == 2.0 and few["p99"] is None and few["p99.9"] is None


@pytest.mark.unit
def test_the_p99_ratio_is_observed_requests_with_an_interval_from_known_times():
    from compare.measure.latency import LatencyStats

    eager = LatencyStats.from_ms([10.0] * 198 + [40.0, 40.0], 1)  # p99 is the 198th request: 10 ms
    half = LatencyStats.from_ms([5.0] * 200, 1)
    assert tail_speedup(LatencyStats.from_ms([10.0] * 200, 1), half) == {"q": 99.0, "ratio": 2.0, "ci": [2.0, 2.0]}
    two_slow = tail_speedup(eager, half)  # resamples with a third slow request put 40 ms at p99
    assert two_slow["ratio"] == 2.0 and two_slow["ci"][0] == 2.0 and two_slow["ci"][1] == 8.0
    assert tail_speedup(LatencyStats.from_ms([10.0] * 99, 1), LatencyStats.from_ms([5.0] * 99, 1)) is None

    rng = __import__("numpy").random.default_rng(0)
    ref = LatencyStats.from_ms(list(10 + rng.exponential(2.0, 1000)), 1)  # a tail that varies by draw
    got = tail_speedup(ref, LatencyStats.from_ms(list(5 + rng.exponential(1.0, 1000)), 1), [500, 500], block=5)
    assert got["ci"][0] < got["ratio"] < got["ci"][1] and got["ci"][1] - got["ci"][0] > 0.02


@pytest.mark.unit
def test_single_stream_samples_one_request_each_with_no_call_between():
    calls = []
    noop = lambda: None  # noqa: E731
    config = TimingConfig(warmup_s=0.0, min_samples=7, max_samples=7, budget_s=10.0, per_request=True,
                          sample_warmup=True)  # per_request wins over the untimed call
    sampler = AlternatingSampler([Timed(calls.append, "a", noop), Timed(calls.append, "b", noop)], config)
    warm_calls = len(calls)
    while not sampler.done():
        sampler.take_rounds(1)
    assert sampler.numbers == [1, 1]
    assert len(calls) - warm_calls == 14  # 7 rounds x 2 requests, nothing untimed between
    assert [s.n for s in sampler.stats()] == [7, 7]


@pytest.mark.unit
def test_single_stream_config_asks_for_enough_requests(tmp_path):
    from compare import cli

    config = cli.make_config(cli.parse(["--scenario", "single-stream", "--processes", "3", "--min-samples", "5",
                                        "--output-dir", str(tmp_path)]))
    assert config.scenario == "single-stream"
    assert config.timing["per_request"] and not config.timing["sample_warmup"]
    assert config.timing["min_samples"] * 3 >= 1000


@pytest.mark.slow  # 30-50 s: the slow tier (CI runs it too), to keep the default suite under 15 min in CI
def test_single_stream_run_reports_request_percentiles(tmp_path):
    proc = run_cli("--scenario", "single-stream", "--backends", "ort", "--workloads", "mlp", "--size", "small",
                   "--processes", "2", "--reference-processes", "1", "--time-budget", "0.5", "--threads", "1",
                   "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = load_results(tmp_path)
    assert data["config"]["scenario"] == "single-stream"
    ort = next(c for c in data["cells"] if c["backend"] == "ort")
    assert ort["latency"]["number"] == 1 and ort["eager_latency"]["number"] == 1
    for side in ("backend", "eager"):
        pct = ort["request_latency_ms"][side]
        assert pct["n"] >= 1000 and pct["n"] == ort["latency"]["n"]
        assert 0 < pct["p50"] <= pct["p90"] <= pct["p99"] <= pct["p99.9"] <= pct["max"]
    summary = (tmp_path / "summary.md").read_text()
    assert "scenario single-stream" in summary and "Per-request latency (single-stream)" in summary
    header = (tmp_path / "results.csv").read_text().splitlines()[0]
    assert "request_p99_ms" in header and "tail_speedup_p99_ci_low" in header
    low, high = ort["tail_speedup"]["ci"]
    assert low <= ort["tail_speedup"]["ratio"] <= high and ort["tail_speedup"]["q"] == 99.0
    assert "p99 speedup [95% CI]" in summary
    assert "per-request latency" in proc.stdout
