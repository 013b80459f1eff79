"""The Python API: compare.run returns results, compare.load reads a run back, and
Results.to_pandas gives one row per cell."""
import pytest

import compare
from conftest import FAST


def test_run_load_and_a_frame_per_cell(tmp_path):
    flags = dict(zip((f.lstrip("-").replace("-", "_") for f in FAST[::2]), FAST[1::2]), processes=1, noise_probe=0)
    results = compare.run(backends=["eager"], workloads=["mlp", "conv"], size="small", output_dir=tmp_path / "run",
                          **flags)
    assert [(c.workload, c.backend, c.status) for c in results.cells] == [("mlp", "eager", "ok"), ("conv", "eager", "ok")]
    frame = results.to_pandas()
    assert list(frame["workload"]) == ["mlp", "conv"] and frame["latency_ms"].gt(0).all()
    again = compare.load(tmp_path / "run")
    assert again.run_id == results.run_id and again.cells[0].latency.median == results.cells[0].latency.median


@pytest.mark.unit
def test_bad_options_raise_one_line_value_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        compare.run(backends=["nope"], output_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown workload"):
        compare.run(workloads=["nope"], output_dir=tmp_path)
