"""Inductor's documented configs as recorded variants: the default stays PyTorch's."""
import pytest

from conftest import FAST, load_results, run_cli


@pytest.mark.slow  # three Inductor builds (one a C++ package)
def test_the_realize_threshold_is_a_recorded_variant_and_the_default_stays_pytorchs(tmp_path):
    proc = run_cli("--backends", "inductor,aot-inductor", "--workloads", "norm_residual", "--size", "small", *FAST,
                   "--inductor-realize-reads-threshold", "1", "--output-dir", tmp_path / "variant")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cells = {c["backend"]: c for c in load_results(tmp_path / "variant")["cells"]}
    assert cells["inductor"]["settings"]["realize_reads_threshold"] == 1
    assert cells["inductor"]["info"]["inductor_configs"] == {"freezing": True, "realize_reads_threshold": 1}
    assert cells["aot-inductor"]["settings"]["inductor_configs"]["realize_reads_threshold"] == 1
    assert all(c["numerics_ok"] for c in cells.values())
    proc = run_cli("--backends", "inductor", "--workloads", "norm_residual", "--size", "small", *FAST,
                   "--output-dir", tmp_path / "default")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    default = next(c for c in load_results(tmp_path / "default")["cells"] if c["backend"] == "inductor")
    assert default["settings"]["realize_reads_threshold"] == 4  # PyTorch's own


@pytest.mark.slow  # two Inductor builds, one autotuning every GEMM (74 s)
def test_max_autotune_is_a_variant_beside_the_default_and_its_search_is_tuning_time(tmp_path):
    """Issue 58: ``inductor:inductor-mode=max-autotune`` beside ``inductor``; the seconds its
    GEMM search took are the cell's tuning seconds (in the break-even), and each GEMM's
    winner is recorded as Inductor's feedback hook reports it."""
    proc = run_cli("--backends", "inductor,inductor:inductor-mode=max-autotune", "--workloads", "mlp",
                   "--size", "small", *FAST, "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cells = {c["backend"]: c for c in load_results(tmp_path)["cells"]}
    default, tuned = cells["inductor"], cells["inductor:inductor-mode=max-autotune"]
    assert default["tuning_s"] is None and "autotune" not in default["info"]
    assert tuned["status"] == "ok" and tuned["numerics_ok"] is True
    autotune = tuned["info"]["autotune"]
    assert autotune["gemms"] and all(g["winner"] and g["candidates"] >= 1 and g["ms"] > 0 for g in autotune["gemms"])
    assert tuned["tuning_s"] == pytest.approx(autotune["seconds"], abs=1e-3) and tuned["tuning_s"] > 0
    assert tuned["compile_phases"]["autotune"] == pytest.approx(tuned["tuning_s"])
    assert sum(tuned["compile_phases"].values()) == pytest.approx(tuned["compile_s"])
