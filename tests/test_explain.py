"""--explain and ``compare explain``: each backend's own profiler, read after timing."""
import json

import pytest

from adapters.profiling import CATEGORIES, categorize, fused_kernel_ops, onnxruntime_profile, per_call
from compare.report.explain import OUTSIDE, category_shares, explain_frame
from compare.results.schema import Cell, LatencyStats, RunResults
from conftest import FAST, load_results, run_cli


@pytest.mark.unit
def test_kernel_categories_from_names_and_ops():
    assert categorize("aten::addmm") == "matmul/conv"
    assert categorize("graph_0_cpp_fused_add_mul_sin_0") == "pointwise"
    assert categorize("fused_layer_norm") == "reduction/norm"
    assert categorize("aten::_softmax") == "reduction/norm"
    assert categorize("FusedMatMul:node_1") == "matmul/conv"
    assert categorize("Transpose:node_2") == "data movement"
    assert categorize("vm.builtin.alloc_storage") == "runtime overhead"
    assert categorize("aten::empty") == "runtime overhead"
    assert fused_kernel_ops("graph_0_cpp_fused_add_mul_sin_3") == ("add", "mul", "sin")


@pytest.mark.unit
def test_per_call_merges_rows_and_divides_by_calls():
    kernels = per_call([("k", 4, 8.0, ()), ("j", 2, 1.0, ()), ("k", 4, 2.0, ())], calls=2)
    assert [(k.name, k.calls, k.ms) for k in kernels] == [("k", 4.0, 5.0), ("j", 1.0, 0.5)]


@pytest.mark.unit
def test_onnxruntime_profile_leaves_out_the_warm_up_run(tmp_path):
    def node(ts, name, op, dur):
        return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur, "args": {"op_name": op}}

    events = [{"cat": "Session", "name": "model_run", "ts": ts} for ts in (0, 100, 200)]
    events += [node(1, "warm", "MatMul", 99_000), node(101, "n1", "FusedMatMul", 1000), node(102, "n2", "Add", 500),
               node(201, "n1", "FusedMatMul", 3000), node(202, "n2", "Add", 500)]
    trace = tmp_path / "ort.json"
    trace.write_text(json.dumps(events))
    profile = onnxruntime_profile(str(trace), calls=2, wall_ms=3.0)
    assert [(k.name, k.calls, k.ms) for k in profile.kernels] == [("FusedMatMul:n1", 1.0, 2.0), ("Add:n2", 1.0, 0.5)]


def _cell(backend, kernels):
    stats = LatencyStats(median=1.0, p10=1, p90=1, q1=1, q3=1, mean=1, min=1, n=3, number=1)
    profile = {"instrument": "test", "calls": 1, "profiled_call_ms": 1.1, "timed_median_ms": 1.0, "note": "",
               "kernels": [{"name": n, "calls": c, "ms": ms, "category": categorize(n), "ops": []}
                           for n, c, ms in kernels]}
    return Cell.from_flat(workload="chain", backend=backend, status="ok", latency=stats, profile=profile)


@pytest.mark.unit
def test_explain_frame_counts_kernels_against_eager_ops():
    eager = _cell("eager", [("aten::sin", 1, 0.3), ("aten::mul", 2, 0.3), ("aten::add", 1, 0.4)])
    fused = _cell("inductor", [("cpp_fused_add_mul_sin_0", 1, 1.0)])
    missing = Cell.from_flat(workload="chain", backend="iree", status="ok", profile={"unavailable": "no profiler here"})
    frame = explain_frame(RunResults(environment={}, config={}, cells=[eager, fused, missing]))
    rows = {r["backend"]: r for r in frame.to_dict("records")}
    assert rows["eager"]["kernels per call"] == 4 and rows["inductor"]["kernels per call"] == 1
    assert rows["inductor"]["eager ops per call"] == 4
    assert rows["iree"]["note"] == "no profiler here"
    shares = category_shares(eager.instruments.profile)  # 1.0 ms of kernels in a 1.1 ms call
    assert sum(shares.values()) == pytest.approx(1.0) and shares[OUTSIDE] == pytest.approx(0.1 / 1.1)
    assert set(shares) == set(CATEGORIES) | {OUTSIDE}


@pytest.mark.unit
def test_the_launch_bound_share_is_the_gpus_idle_part_of_the_call_and_the_table_shows_it():
    from adapters.profiling import launch_bound_share

    assert launch_bound_share(0.02, 0.1) == pytest.approx(0.8)  # 20 us of kernels in a 100 us call
    assert launch_bound_share(0.1, 0.1) == 0.0 and launch_bound_share(0.12, 0.1) == 0.0  # overlap clamps
    assert launch_bound_share(0.1, 0.0) is None
    gpu = _cell("inductor", [("triton_poi_fused_0", 1, 0.25)])
    gpu.instruments.profile["facts"] = {"gpu_busy_ms": 0.25, "launch_bound_share": launch_bound_share(0.25, 1.1)}
    row = explain_frame(RunResults(environment={}, config={}, cells=[gpu])).to_dict("records")[0]
    assert row["launch-bound share"] == "77%"


def _explain_run(out, backends: str, workloads: str):
    proc = run_cli("--backends", backends, "--workloads", workloads, "--size", "small", *FAST, "--explain",
                   "--output-dir", out, "--no-history", "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def explained_quick(tmp_path_factory):
    """The default suite's real run: two backends, one workload (about 30 s)."""
    return _explain_run(tmp_path_factory.mktemp("explain") / "run", "ort,tvm-untuned", "norm_residual")


@pytest.fixture(scope="module")
def explained(tmp_path_factory):
    """Every CPU backend (Inductor's profiled build costs a second compile): slow tier."""
    return _explain_run(tmp_path_factory.mktemp("explain-all") / "run", "inductor,ort,tvm-untuned,iree",
                        "elementwise_chain,norm_residual")


def _cells(out):
    return {(c["workload"], c["backend"]): c for c in load_results(out)["cells"]}


def _check_profiles(out):
    for (workload, backend), cell in _cells(out).items():
        profile = cell["profile"]
        assert profile is not None, (workload, backend)
        if "unavailable" in profile:
            pytest.fail(f"{workload}/{backend}: {profile['unavailable']}")
        kernel_ms = sum(k["ms"] for k in profile["kernels"])
        # kernels were seen, and their time fits in the profiled call (IREE's two workers may overlap)
        assert 0 < kernel_ms <= 2.0 * profile["profiled_call_ms"], (workload, backend)
        assert {k["category"] for k in profile["kernels"]} <= set(CATEGORIES)
        assert sum(category_shares(profile).values()) == pytest.approx(1.0)


def test_ort_names_fused_nodes_and_tvm_its_kernels(explained_quick):
    _check_profiles(explained_quick)
    cells = _cells(explained_quick)
    ort_ops = {k["ops"][0] for k in cells[("norm_residual", "ort")]["profile"]["kernels"]}
    assert ort_ops & {"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization"}, ort_ops
    assert any(k["name"].startswith("fused_") for k in cells[("norm_residual", "tvm-untuned")]["profile"]["kernels"])


def test_explain_command_and_reports_show_the_profiles(explained_quick):
    proc = run_cli("explain", explained_quick)
    assert proc.returncode == 0, proc.stderr
    assert "kernels per call" in proc.stdout and "tvm-untuned" in proc.stdout
    assert "## Where the time goes" in (explained_quick / "summary.md").read_text()
    assert "Where the time goes" in (explained_quick / "report.html").read_text()


@pytest.mark.slow
def test_every_cpu_backend_explains_its_time(explained):
    _check_profiles(explained)


@pytest.mark.slow
def test_inductor_fuses_the_chain(explained):
    cells = _cells(explained)
    launches = {b: sum(k["calls"] for k in cells[("elementwise_chain", b)]["profile"]["kernels"])
                for b in ("eager", "inductor")}
    assert launches["inductor"] < launches["eager"]
    assert any(k["name"].startswith("graph_") and "fused" in k["name"]
               for k in cells[("elementwise_chain", "inductor")]["profile"]["kernels"])


@pytest.mark.unit
def test_paper_fusion_section_sets_kernels_beside_achieved_traffic():
    from compare.report.paper import _fusion_section

    eager = _cell("eager", [("aten::sin", 1, 0.3), ("aten::mul", 2, 0.3), ("aten::add", 1, 0.4)])
    fused = _cell("inductor", [("cpp_fused_add_mul_sin_0", 1, 0.5)])
    for cell in (eager, fused):
        cell.workload = "elementwise_chain"
        cell.instruments.work = {"min_bytes": 8e6, "flops": 1e6}
    fused.latency = LatencyStats(median=0.5, p10=1, p90=1, q1=1, q3=1, mean=1, min=1, n=3, number=1)
    fused.speedup, fused.speedup_ci = 2.0, (1.9, 2.1)
    rows = {cells[2]: cells[3:7] for line in _fusion_section([eager, fused]) for row in line.splitlines()
            if (cells := [c.strip() for c in row.split("|")]) and len(cells) > 7 and cells[2] in ("eager", "inductor")}
    # kernels per call, eager's ops, minimum MB, GB/s (8 MB in 1 ms and in 0.5 ms)
    assert rows == {"eager": ["4", "4", "8", "8"], "inductor": ["1", "4", "8", "16"]}
    assert "run `compare paper --explain`" in "\n".join(_fusion_section([Cell.from_flat(workload="conv", backend="x",
                                                                                status="ok")]))


@pytest.mark.unit
def test_a_compiler_rule_the_profile_names_is_listed_once_per_backend():
    from compare.report.explain import backend_notes
    from compare.results.schema import Cell, RunResults

    profile = {"facts": {"realization": "Inductor recomputes reused buffers"}, "kernels": []}
    cells = [Cell.from_flat(workload=w, backend="inductor", status="ok", profile=profile) for w in ("mlp", "conv")]
    assert backend_notes(RunResults(environment={}, config={}, cells=cells)) == [
        "- inductor: Inductor recomputes reused buffers."]
