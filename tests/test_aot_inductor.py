"""AOTInductor: export, an ahead-of-time .pt2 package, its load; the stored package as the
warm start (hash-checked, keyed by the freezing setting too); symbolic shapes with
torch.export.Dim."""
import pytest

from conftest import FAST, load_results, run_cli

COMMON = ["--backends", "aot-inductor", "--workloads", "mlp", "--size", "small", *FAST, "--no-history"]


def _cell(out):
    return next(c for c in load_results(out)["cells"] if c["backend"] == "aot-inductor")


@pytest.fixture(scope="module")
def warm_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("aoti")
    cells = {}
    for name in ("warm1", "warm2"):
        proc = run_cli(*COMMON, "--cache", "warm", "--tuning-logs", base / "store", "--output-dir", base / name)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        cells[name] = _cell(base / name)
    return base, cells


def test_aot_inductor_builds_a_package_and_agrees(warm_runs):
    _, cells = warm_runs
    cell = cells["warm1"]
    assert cell["status"] == "ok" and cell["numerics_ok"] is True, cell["error"]
    assert list(cell["compile_phases"]) == ["export", "compile", "load", "first_call"]
    assert cell["settings"]["freezing"] is True and cell["info"]["package_bytes"] > 0
    assert cell["cache"] == "miss"


def test_aot_inductor_warm_start_loads_the_stored_package(warm_runs):
    base, cells = warm_runs
    second = cells["warm2"]
    assert second["cache"] == "hit" and second["info"]["cache_evidence"]["loaded_from_store"] is True
    assert second["compile_phases"]["export"] == 0.0 and second["compile_phases"]["compile"] == 0.0
    # a load, not a build: 4.1 s against the build's 34 s in a loaded parallel suite (a tenth failed once)
    assert second["compile_s"] < cells["warm1"]["compile_s"] / 4
    assert second["numerics_ok"] is True
    assert list((base / "store" / "aot-inductor").glob("*/*/model.pt2"))


@pytest.mark.slow  # a third C++ build (28 s): the slow tier
def test_another_freezing_setting_misses(warm_runs):
    base, _ = warm_runs
    out = base / "unfrozen"
    proc = run_cli(*COMMON, "--cache", "warm", "--tuning-logs", base / "store", "--output-dir", out, "--inductor-freezing", "off")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _cell(out)["cache"] == "miss" and _cell(out)["settings"]["freezing"] is False


@pytest.mark.slow  # default tier: 20 minutes on 2 cores; CI runs it in the slow tier
def test_symbolic_shapes_compile_once_for_every_batch(tmp_path):
    import torch

    from adapters import CompileContext, get_backend

    backend = get_backend("aot-inductor")
    ctx = CompileContext("mlp", "mlp-test", "cpu", 1, tmp_path, options=backend.options_type(), dynamic_max=16)
    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    session = backend.dynamic_session(module, [torch.randn(4, 8)], [{0: "batch"}], "symbolic", ctx)
    for batch in (4, 7, 16):
        x = torch.randn(batch, 8)
        _, out = session.run([x])
        torch.testing.assert_close(out, module(x), rtol=1e-5, atol=1e-5)
    assert session.compiles() == 1
