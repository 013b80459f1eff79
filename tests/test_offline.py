"""--scenario offline: throughput on all the threads, each backend with its own streams."""
import time

import pytest

from adapters.base import BackToBackPool, CompileContext, Compiled, StreamPool, StreamSetting
from compare.measure.latency import LatencyStats
from compare.measure.timing import AlternatingSampler, Timed, TimingConfig
from conftest import FAST, load_results, run_cli


class CountingCompiled(Compiled):
    """Counts its calls and synchronizations."""

    def __init__(self):
        self.calls, self.syncs = [], 0

    def run(self, prepared):
        self.calls.append(prepared)

    def synchronize(self):
        self.syncs += 1


@pytest.mark.unit
def test_back_to_back_pool_issues_every_request_then_waits():
    compiled = CountingCompiled()
    pool = BackToBackPool(compiled, "inputs", "no multi-stream mode in dlcompare for fake")
    pool.run_requests(7)
    assert compiled.calls == ["inputs"] * 7 and compiled.syncs == 1
    assert pool.setting() == StreamSetting(1, 1, None, "no multi-stream mode in dlcompare for fake")
    assert compiled.stream_pool("inputs") is None  # the base has no pool of its own


@pytest.mark.unit
def test_offline_samples_are_per_inference_with_one_pool_call_each():
    calls = []
    config = TimingConfig(warmup_s=0.0, min_samples=5, max_samples=5, offline=True, sample_warmup=True)
    pool = Timed(lambda n: (calls.append(n), time.sleep(n * 1e-4)), 40, lambda: None, requests=40)
    sampler = AlternatingSampler([pool], config)
    warm = len(calls)
    while not sampler.done():
        sampler.take_rounds(1)
    assert sampler.numbers == [1] and len(calls) - warm == 5  # no untimed call between samples
    (stats,) = sampler.stats()
    assert stats.number == 40
    assert 0.1 <= stats.median < 0.3  # ms per inference: 0.1 ms of sleep each, not 4 ms per call


class SleepingPool(StreamPool):
    """Two requests in flight, 1 ms per request."""

    def __init__(self):
        self.batches = []

    def run_requests(self, requests):
        self.batches.append(requests)
        time.sleep(requests * 1e-3)

    def setting(self):
        return StreamSetting(2, 2, 1, "test")


@pytest.mark.unit
def test_requests_per_sample_last_about_the_sample_time_in_whole_rounds():
    from compare.measure.timing import OFFLINE_SAMPLE_S
    from compare.scenarios.offline import requests_per_sample

    pool = SleepingPool()
    requests = requests_per_sample(pool, 2)
    assert requests % 2 == 0
    assert 0.7 * OFFLINE_SAMPLE_S <= requests * 1e-3 <= 1.5 * OFFLINE_SAMPLE_S
    assert pool.batches[0] == 2 and pool.batches == sorted(pool.batches)  # doubling, from the requests in flight


@pytest.mark.unit
def test_offline_config_and_context(tmp_path):
    from compare import cli

    config = cli.make_config(cli.parse(["--scenario", "offline", "--output-dir", str(tmp_path)]))
    assert config.scenario == "offline" and config.timing["offline"] and not config.timing["sample_warmup"]
    assert CompileContext("w", "k", "cpu", 2, tmp_path).scenario == "back-to-back"


@pytest.mark.unit
def test_throughput_from_known_samples():
    from compare.results.schema import Cell, cell_row
    from compare.scenarios.offline import fill_throughput

    backend = LatencyStats.from_ms([2.0, 2.0, 2.1, 1.9, 2.0, 2.0], 100)  # 500 inferences/s
    eager = LatencyStats.from_ms([4.0, 4.1, 3.9, 4.0, 4.0, 4.0], 50)  # 250 inferences/s
    setting = {"streams": 2, "requests_in_flight": 4, "threads_per_stream": 1, "source": "test",
               "requests_per_sample": 100}
    cell = Cell.from_flat("mlp", "x", "ok", latency=backend, eager_latency=eager, process_samples=[6],
                info={"offline": {"batch": 8, "backend": setting, "eager": {**setting, "streams": 1}}})
    fill_throughput(cell)
    tp = cell.scenario.throughput
    assert tp["per_s"] == pytest.approx(500.0) and tp["samples_per_s"] == pytest.approx(4000.0)
    assert tp["ci"][0] <= 500.0 <= tp["ci"][1] and tp["ci"][1] <= 1e3 / 1.9 + 1e-9
    assert tp["streams"] == 2 and tp["batch"] == 8
    assert tp["eager"]["per_s"] == pytest.approx(250.0) and tp["eager"]["streams"] == 1
    row = cell_row(cell)
    assert row["throughput_per_s"] == pytest.approx(500.0) and row["streams"] == 2
    assert row["eager_throughput_per_s"] == pytest.approx(250.0)


@pytest.mark.unit
def test_ort_splits_the_threads_over_its_sessions(tmp_path):
    from adapters.ort import OrtOptions, stream_threads

    def ctx(threads, streams=0, scenario="offline"):
        return CompileContext("w", "k", "cpu", threads, tmp_path, scenario=scenario,
                              options=OrtOptions(ort_offline_streams=streams))

    assert stream_threads(ctx(2)) == [1, 1]
    assert stream_threads(ctx(5, 2)) == [3, 2]
    assert stream_threads(ctx(2, 8)) == [1, 1]  # never more sessions than threads
    assert stream_threads(ctx(4, scenario="back-to-back")) == [4]


def test_offline_run_records_throughput_and_each_backends_streams(tmp_path):
    proc = run_cli("--scenario", "offline", "--backends", "ort,openvino", "--workloads", "mlp", "--size", "small",
                   "--threads", "2", *FAST, "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = load_results(tmp_path)
    assert data["config"]["scenario"] == "offline"
    cells = {c["backend"]: c for c in data["cells"]}
    for name, cell in cells.items():
        assert cell["status"] == "ok", (name, cell["error"])
        tp = cell["throughput"]
        assert tp["per_s"] > 0 and tp["ci"][0] <= tp["per_s"] <= tp["ci"][1]
        assert tp["eager"]["per_s"] > 0 and tp["eager"]["streams"] == 1
        assert tp["requests_per_sample"] % tp["requests_in_flight"] == 0
        assert cell["latency"]["number"] == tp["requests_per_sample"]
    assert cells["eager"]["throughput"]["streams"] == 1
    assert "no multi-stream mode in dlcompare for eager" in cells["eager"]["throughput"]["source"]
    ort = cells["ort"]
    assert ort["throughput"]["streams"] == 2 and ort["throughput"]["threads_per_stream"] == 1
    assert ort["settings"]["offline_sessions"] == 2
    openvino = cells["openvino"]
    properties = openvino["info"]["openvino_properties"]
    assert properties["PERFORMANCE_HINT"] == "THROUGHPUT"
    assert openvino["throughput"]["streams"] == properties["NUM_STREAMS"]  # OpenVINO's own, not ours
    assert openvino["throughput"]["requests_in_flight"] == properties["OPTIMAL_NUMBER_OF_INFER_REQUESTS"]
    summary = (tmp_path / "summary.md").read_text()
    assert "scenario offline" in summary and "## Throughput (offline)" in summary
    assert "throughput_per_s" in (tmp_path / "results.csv").read_text().splitlines()[0]
    assert 'alt="Throughput (offline)"' in (tmp_path / "report.html").read_text()
    assert "throughput (offline)" in proc.stdout


@pytest.mark.unit
def test_iree_pool_keeps_one_invocation_in_flight_per_timeline():
    """The pool's issue loop against IREE's real semaphores and fences, with a fake device:
    each invocation signals its fence 5 ms after it was issued, from another thread."""
    import threading
    from types import SimpleNamespace

    iree_runtime = pytest.importorskip("iree.runtime")
    from adapters.iree import IreeStreamPool, OfflineStreams

    lock, pending, most, issued = threading.Lock(), [0], [0], []

    class FakeDevicePool(IreeStreamPool):
        def _invoke(self, wait, signal):
            assert self._inputs == ["view"]
            with lock:
                pending[0] += 1
                most[0] = max(most[0], pending[0])
                issued.append(wait)

            def done():
                with lock:
                    pending[0] -= 1
                signal.signal()
            threading.Timer(0.005, done).start()

    device = iree_runtime.Config("local-sync").device
    streams = OfflineStreams(context=None, function=None, device=device, count=3, task_workers=2)
    pool = FakeDevicePool(streams, [SimpleNamespace(_buffer_view="view")])
    start = time.perf_counter()
    pool.run_requests(12)
    elapsed = time.perf_counter() - start
    assert len(issued) == 12 and pending[0] == 0  # every one issued, and completed on return
    assert most[0] == 3  # three in flight at once, never more
    assert elapsed < 12 * 0.005  # 4 rounds of 3 at once (about 20 ms), not 12 one after another
    pool.run_requests(3)  # the timelines go on from where they were
    assert pool._values == [5, 5, 5]
    setting = pool.setting()
    assert (setting.streams, setting.requests_in_flight, setting.threads_per_stream) == (3, 3, None)
    assert "--iree-offline-streams 3" in setting.source and "2 task workers" in setting.source


@pytest.mark.unit
def test_iree_offline_streams_share_a_task_device(tmp_path):
    from adapters.iree import IreeBackend, IreeOptions, offline_streams

    def ctx(threads, streams=2, scenario="offline", device="cpu"):
        return CompileContext("w", "k", device, threads, tmp_path, scenario=scenario,
                              options=IreeOptions(iree_offline_streams=streams))

    assert offline_streams(ctx(2)) == 2 and offline_streams(ctx(2, 3)) == 3
    assert offline_streams(ctx(2, scenario="back-to-back")) == 0 and offline_streams(ctx(2, device="cuda")) == 0
    settings = IreeBackend().settings(ctx(1))
    # one thread, two streams: local-task's one worker, never local-sync's inline calls on two threads
    assert settings["driver"] == "local-task" and settings["task_topology_group_count"] == 1
    assert settings["offline_streams"] == 2
    assert IreeBackend().settings(ctx(1, streams=1))["driver"] == "local-sync"
    assert "offline_streams" not in IreeBackend().settings(ctx(2, scenario="back-to-back"))


def _offline_cell(backend, batch, per_s, ci_half=0.01, workload="mlp", status="ok"):
    """An offline cell as fill_throughput leaves it: inferences/s at ``batch`` with a
    relative 95% half-interval ``ci_half``."""
    from compare.results.schema import Cell

    tp = {"batch": batch, "per_s": per_s, "ci": [per_s * (1 - ci_half), per_s * (1 + ci_half)],
          "samples_per_s": per_s * batch, "streams": 1, "requests_in_flight": 1, "threads_per_stream": 2,
          "source": "test", "eager": {"per_s": 100.0}}
    return Cell.from_flat(workload, backend, status, batch=batch, throughput=tp if status == "ok" else None)


@pytest.mark.unit
def test_best_batch_per_backend_from_samples_per_s():
    from compare.report.text import summary_markdown
    from compare.results.schema import RunResults
    from compare.scenarios.offline import best_batch_rows, throughput_rows

    cells = [_offline_cell("tvm", 1, 1000.0), _offline_cell("tvm", 8, 400.0), _offline_cell("tvm", 32, 90.0),
             # inductor peaks at batch 8: 8 x 300 = 2400 samples/s, batch 32's 32 x 74 = 2368 lies within its CI
             _offline_cell("inductor", 1, 900.0), _offline_cell("inductor", 8, 300.0, 0.05),
             _offline_cell("inductor", 32, 74.0, 0.05), _offline_cell("inductor", 64, 0.0, status="failed"),
             _offline_cell("ort", 8, 500.0),  # one batch only: no sweep, no row
             _offline_cell("tvm", 1, 50.0, workload="conv"), _offline_cell("tvm", 8, 10.0, workload="conv")]
    run = RunResults(environment={}, config={}, cells=cells)
    rows = {(r["workload"], r["backend"]): r for r in best_batch_rows(run)}
    assert set(rows) == {("mlp", "tvm"), ("mlp", "inductor"), ("conv", "tvm")}
    assert rows["mlp", "tvm"]["best batch"] == 8 and rows["mlp", "tvm"]["samples/s"] == "3200"
    assert rows["mlp", "tvm"]["samples/s by batch"] == "b1: 1000, b8: 3200, b32: 2880"
    assert rows["mlp", "tvm"]["within 95% CI"] == "none"
    assert rows["mlp", "inductor"]["best batch"] == 8 and rows["mlp", "inductor"]["within 95% CI"] == "b32"
    assert rows["conv", "tvm"]["best batch"] == 8  # 80 samples/s beats 50
    marked = [(r["workload"], r["backend"]) for r in throughput_rows(run) if r["best batch"] == "best"]
    assert marked == [("mlp[b8]", "tvm"), ("mlp[b8]", "inductor"), ("conv[b8]", "tvm")]
    text = summary_markdown(run)
    assert "## Best batch (offline)" in text and "b1: 1000, b8: 3200, b32: 2880" in text
    from compare.report.html import render_html

    assert "Best batch (offline)" in render_html(run)
    single = RunResults(environment={}, config={}, cells=[_offline_cell("tvm", 1, 1000.0)])
    assert "best batch" not in throughput_rows(single)[0] and "Best batch" not in summary_markdown(single)
