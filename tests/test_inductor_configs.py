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
