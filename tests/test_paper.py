"""The survey's experiments: arithmetic by hand, and a small real run."""
from pathlib import Path

import pytest
import torch

from compare.experiments.dynamic import shape_plan, summarize_records
from compare.measure.roofline import place
from compare.measure.work import count_work
from compare.results.derived import amortization_curve
from conftest import load_results, run_cli
from workloads import builtin_workloads


@pytest.mark.unit
def test_amortization_curve_arithmetic():
    curve = amortization_curve(compile_s=10.0, latency_ms=1.0, eager_ms=3.0)
    by_n = {p["calls"]: p for p in curve}
    assert by_n[1000]["compiled_s"] == pytest.approx(11.0) and by_n[1000]["eager_s"] == pytest.approx(3.0)
    assert by_n[10000]["compiled_s"] == pytest.approx(20.0) and by_n[10000]["eager_s"] == pytest.approx(30.0)
    assert [p["calls"] for p in curve][0] == 1 and curve[-1]["calls"] == 10_000_000


@pytest.mark.unit
def test_roofline_on_a_hand_counted_matmul():
    m, k, n = 64, 128, 32
    model = torch.nn.Linear(k, n, bias=False)
    x = torch.randn(m, k)
    work = count_work(model, [x], [model(x)])
    assert work["flops"] == 2 * m * k * n
    assert work["min_bytes"] == 4 * (m * k + k * n + m * n)
    ceilings = {"peak_gflops": 100.0, "peak_gbps": 10.0}
    # 1 ms measured: bound = max(flops / 100e9, bytes / 10e9)
    placed = place(work, 1.0, ceilings)
    bound_s = max(work["flops"] / 100e9, work["min_bytes"] / 10e9)
    assert placed["fraction_of_roofline"] == pytest.approx(bound_s / 1e-3)
    assert placed["achieved_gflops"] == pytest.approx(work["flops"] / 1e-3 / 1e9)
    assert placed["bound"] == "memory"  # intensity 9.1 FLOP/B is below the ridge at 100/10 = 10
    assert placed["arithmetic_intensity"] == pytest.approx(work["flops"] / work["min_bytes"])


@pytest.mark.unit
def test_transcendental_ops_are_counted_so_a_chain_of_them_is_compute_bound():
    from compare.measure.work import POINTWISE_FLOPS
    from workloads import build_model, make_inputs

    x = torch.randn(64, 32)
    work = count_work(torch.nn.Identity(), [x], [x])  # no op: no work
    assert work["flops"] == 0
    chain = builtin_workloads()["elementwise_chain"]
    model, inputs = build_model(chain, "small"), make_inputs(chain.input_specs("small"))
    work = count_work(model, inputs, [model(*inputs)])
    n = inputs[0].numel()
    assert work["pointwise_flops_by_op"]["sin"] == POINTWISE_FLOPS["sin"] * n
    assert work["matmul_flops"] == 0 and work["flops"] > 80 * n
    # intensity of this chain: > 10 FLOP/byte, right of any ridge point a 2-core CPU has
    ceilings = {"peak_gflops": 100.0, "peak_gbps": 20.0}
    assert place(work, 1.0, ceilings)["bound"] == "compute"


@pytest.mark.unit
def test_ceiling_check_names_cells_above_a_ceiling():
    from compare.measure.roofline import ceiling_check
    from compare.results.schema import Cell

    ceilings = {"peak_gflops": 10.0, "peak_gbps": 5.0, "last_level_cache_mb": 32.0}
    fast = Cell.from_flat(workload="mlp", backend="ort", status="ok", work={"flops": 1e9, "min_bytes": 8e6},
                roofline={"achieved_gflops": 2.0, "achieved_gbps": 9.0})
    notes = ceiling_check([fast], ceilings)
    assert len(notes) == 1 and "exceeds the DRAM ceiling" in notes[0] and "32 MB last-level cache" in notes[0]


@pytest.mark.unit
def test_shape_plan_is_seeded_and_cycles():
    w = builtin_workloads()["mlp"]
    a = shape_plan(w, "small", distinct=3, calls=9, seed=1)
    b = shape_plan(w, "small", distinct=3, calls=9, seed=1)
    assert a == b and len(a["values"]) == 3 and a["base"] in a["values"]
    assert sorted(set(a["sequence"])) == a["values"] and len(a["sequence"]) == 9
    assert a["sequence"][:3] == a["sequence"][3:6]  # cycling


@pytest.mark.unit
def test_dynamic_summary_arithmetic():
    records = [
        {"workload": "w", "backend": "b", "strategy": "specialize", "status": "ok", "transition_cost_s": 10.0,
         "warmup_s": 12.0, "compiles": 5, "transition_count": 4},
        {"workload": "w", "backend": "b", "strategy": "symbolic", "status": "ok", "transition_cost_s": 3.0,
         "warmup_s": 14.0, "compiles": 1, "transition_count": 4},
        {"workload": "w", "backend": "b", "strategy": "steady", "status": "ok", "slowdown": 0.1,
         "slowdown_ci": [0.05, 0.15]},
    ]
    (row,) = summarize_records(records)
    assert row["transition_reduction"] == pytest.approx(0.7)
    assert row["steady_slowdown"] == pytest.approx(0.1) and row["steady_slowdown_ci"] == [0.05, 0.15]
    assert row["transitions"] == 4


@pytest.fixture(scope="module")
def paper_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("paper")
    proc = run_cli("paper", "--backends", "inductor", "--workloads", "mlp", "--size", "small",
                   "--dynamic-sizes", "3", "--dynamic-calls", "6", "--numerics-draws", "3",
                   "--time-budget", "0.2", "--min-samples", "3", "--output-dir", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.mark.slow  # the paper command's real run (3 processes, the dynamic experiment, the ceilings): 144 s
def test_paper_counts_inductor_recompiles(paper_run):
    records = {r["strategy"]: r for r in load_results(paper_run)["experiments"]["dynamic_shapes"]["records"]}
    assert {r["status"] for r in records.values()} == {"ok"}
    # one graph per distinct shape plus the warm-up's, read from dynamo
    assert records["specialize"]["compiles"] == 4
    assert records["symbolic"]["compiles"] == 1
    assert len(records["specialize"]["transitions"]) == records["specialize"]["transition_count"] == 3
    assert records["symbolic"]["numerics_ok"] and records["specialize"]["numerics_ok"]
    assert records["specialize"]["transition_cost_s"] > records["symbolic"]["transition_cost_s"]
    lo, hi = records["steady"]["slowdown_ci"]
    assert lo <= records["steady"]["slowdown"] <= hi


@pytest.mark.slow
def test_paper_fields_and_markdown(paper_run):
    data = load_results(paper_run)
    cell = next(c for c in data["cells"] if c["backend"] == "inductor")
    assert cell["numerics_draws"] == 3
    assert cell["amortization"] and cell["work"]["flops"] > 0 and cell["roofline"]["fraction_of_roofline"] > 0
    assert cell["compile_peak_mb"] is not None and cell["steady_state_mb"] is not None
    assert len(cell["process_samples"]) == 3  # compare paper repeats every cell in 3 processes
    ceilings = data["experiments"]["roofline_ceilings"]
    assert ceilings["peak_gflops"] > 0
    # the compute ceiling is the fastest GEMM over the libraries the backends call, and says which
    assert len(ceilings["gflops_by_library"]) == 3 and ceilings["peak_gemm_library"] in ceilings["gflops_by_library"]
    assert ceilings["peak_gflops"] == max(max(sizes.values()) for sizes in ceilings["gflops_by_library"].values())
    text = (paper_run / "paper.md").read_text()
    for heading in ("1. Static-shape speedups", "2. Compile-cost amortization", "3. Numerical agreement",
                    "4. Dynamic shapes", "5. Memory", "6. Roofline"):
        assert f"## {heading}" in text
    assert "~1.0x (within 1%)" in text and "5.48e-5" in text and "RTX A6000" in text  # mlp's paper figure


@pytest.mark.unit
def test_the_roofline_probes_the_gemm_libraries_the_backends_declare():
    """The compute ceiling's libraries come from the adapters (Backend.gemm_probe), not from
    calls into a compiler written in the experiment."""
    from adapters import backend_classes
    from compare.experiments import roofline
    from compare.experiments.roofline import gemm_libraries

    libraries = gemm_libraries()
    declared = {probe[0] for cls in backend_classes().values() if (probe := cls.gemm_probe())}
    assert set(libraries) == declared and "MLAS (onnxruntime MatMul)" in declared
    assert "onnxruntime" not in Path(roofline.__file__).read_text()
