"""Stretches of interleaved time on real workers: a group that memory cannot hold at once
runs in several stretches, each with eager-only processes of its own; the float64
reference outputs are computed by a workload's first worker and read by the others."""
import compare
from compare.harness import executor
from conftest import FIXTURES


def test_a_group_memory_cannot_hold_runs_in_stretches_each_with_its_eager_only_process(tmp_path, monkeypatch):
    # With no room beside one cell, pass 1 times the reference with ort, then again with
    # openvino; pass 2 keeps those stretches. Each cell is checked against the eager-only
    # processes of its own stretches.
    monkeypatch.setattr(executor, "memory_room", lambda started: False)
    results = compare.run(backends=["ort", "openvino"], workloads=["tiny_linear"], size="small", processes=2,
                          reference_processes=2, workload_file=str(FIXTURES / "tiny_workloads.py"),
                          time_budget=0.4, min_samples=3, noise_probe=0, output_dir=tmp_path / "run")
    cells = {c.backend: c for c in results.cells}
    stretches = {b: [p["stretch"] for p in c.spread.processes] for b, c in cells.items()}
    assert stretches["ort"] == ["0.0", "1.0"] and stretches["openvino"] == ["0.1", "1.1"]
    assert stretches["eager"] == ["0.0", "0.1", "1.0", "1.1"]
    for b in ("ort", "openvino"):  # each checked against the eager-only processes of its own two stretches
        assert cells[b].status == "ok" and cells[b].spread.interval["in_cell_check"]["stretches"] == 2
    # eager's worker started first and made the float64 outputs; the others read them
    assert cells["eager"].conditions.info["float64_reference"] == {"draws": 1, "shared": 0, "fp32_ops": []}
    for b in ("ort", "openvino"):
        assert cells[b].conditions.info["float64_reference"] == {"draws": 1, "shared": 1, "fp32_ops": []}
        assert cells[b].numerics.max_abs_err_fp64 is not None and cells[b].numerics.numerics_ok
