"""--cache cold/warm means the same for every backend, with evidence from the backend."""
import json

import pytest

from conftest import FAST, load_results, run_cli

BACKENDS = ["inductor", "ort", "iree"]
# XLA's and ExecuTorch's imports were 70 of the fixture's 135 s: their warm hits are the slow tier's
SLOW_BACKENDS = ["xla", "executorch"]
# Freezing off: with it, torch 2.13 bypasses Inductor's FX-graph cache on CPU (see
# test_frozen_graphs_are_reported_as_bypassed), and this file tests the cache itself.
COMMON = ["--workloads", "mlp", "--size", "small", *FAST, "--threads", "1",
          "--inductor-freezing", "off"]


def _cells(out):
    return {c["backend"]: c for c in load_results(out)["cells"]}


def _three_runs(base, backends):
    """A cold run, then two warm runs sharing one store: each run's cells and the store's files after it."""
    store = base / "store"
    runs, stored_after = [], {}
    for name in ("cold", "warm1", "warm2"):
        mode = "cold" if name == "cold" else "warm"
        proc = run_cli("--backends", ",".join(backends), *COMMON, "--cache", mode, "--tuning-logs", store,
                       "--output-dir", base / name)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        runs.append(_cells(base / name))
        stored_after[name] = sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file())
    return base, store, runs, stored_after


@pytest.fixture(scope="module")
def warm_runs(tmp_path_factory):
    return _three_runs(tmp_path_factory.mktemp("cache"), BACKENDS)


def _check_cold_then_warm(runs_and_store, backends):
    base, store, (cold, first, second), stored_after = runs_and_store
    assert stored_after["cold"] == []  # the cold run left the store empty ...
    assert any(path.startswith(backends[0]) for path in stored_after["warm1"])  # ... where a warm one writes
    for backend in backends:
        assert cold[backend]["cache"] == "cold" and cold[backend]["numerics_ok"] is True
        assert first[backend]["cache"] == "miss", first[backend]["info"]
        assert second[backend]["cache"] == "hit", second[backend]["info"]
        # XLA's cache holds the compiled executable only: export, convert and lower run again
        phase = (lambda cell: cell["compile_phases"]["compile"]) if backend == "xla" else (lambda cell: cell["compile_s"])
        assert phase(second[backend]) < phase(first[backend]), backend
        assert second[backend]["numerics_ok"] is True
        assert list((store / backend).glob("*/*")), f"no artifacts stored for {backend}"
        evidence = second[backend]["info"]["cache_evidence"]
        if backend == "inductor":
            assert evidence["fxgraph_cache_hit"] >= 1 and evidence["fxgraph_cache_miss"] == 0
        elif backend == "xla":  # JAX's own cache-hit event, on an entry that was there before
            assert evidence["jax_cache_hit_events"] >= 1 and evidence["entries_before"] == evidence["entries_after"] >= 1
        else:
            assert evidence["loaded_from_store"] is True, backend


def test_cold_writes_nothing_then_a_warm_second_run_hits_and_compiles_faster(warm_runs):
    _check_cold_then_warm(warm_runs, BACKENDS)


@pytest.mark.slow
def test_xla_and_executorch_cold_then_warm_hits(tmp_path):
    _check_cold_then_warm(_three_runs(tmp_path, SLOW_BACKENDS), SLOW_BACKENDS)


@pytest.mark.slow  # a default-size compile of three backends
def test_other_shape_misses(warm_runs, tmp_path):
    base, store, _, _ = warm_runs
    proc = run_cli("--backends", ",".join(BACKENDS), *[a if a != "small" else "default" for a in COMMON],
                   "--cache", "warm", "--tuning-logs", store, "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cells = _cells(tmp_path)
    for b in BACKENDS:
        assert cells[b]["cache"] == "miss", (b, cells[b]["info"])


@pytest.mark.parametrize("backend", ["ort", pytest.param("iree", marks=pytest.mark.slow)])
def test_other_backend_version_misses(warm_runs, tmp_path, backend):
    base, store, _, _ = warm_runs
    (meta_path,) = list((store / backend).glob("*/mlp-small-*/artifact.json"))
    meta = json.loads(meta_path.read_text())
    meta["versions"] = {k: "0.0.0-other" for k in meta["versions"]}
    meta_path.write_text(json.dumps(meta))
    proc = run_cli("--backends", backend, *COMMON, "--cache", "warm", "--tuning-logs", store, "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _cells(tmp_path)[backend]["cache"] == "miss"


def test_inductor_key_holds_the_torch_version(warm_runs):
    _, store, _, _ = warm_runs
    (target_dir,) = list((store / "inductor").iterdir())
    assert "torch2.13.0" in target_dir.name and "1t" in target_dir.name


@pytest.mark.unit
def test_frozen_graphs_are_reported_as_bypassed():
    from collections import Counter

    from adapters.inductor import cache_evidence, cache_result

    counters = {"inductor": Counter(fxgraph_cache_bypass=1), "aot_autograd": Counter()}
    assert cache_result(cache_evidence(counters)) == "bypass"
    counters = {"inductor": Counter(fxgraph_cache_hit=1), "aot_autograd": Counter()}
    assert cache_result(cache_evidence(counters)) == "hit"
    assert cache_result(cache_evidence({"inductor": Counter(), "aot_autograd": Counter()})) == "miss"


# What each backend builds, zero in a process that loaded the first process's artifact.
BUILD_PHASES = {"ort": ("export",), "iree": ("export", "compile"), "aot-inductor": ("export", "compile"),
                "openvino": ("convert",)}


@pytest.mark.parametrize("backends", [
    "ort,openvino",  # the default tier: compilers that build in seconds
    # a C++ build each, and IREE's (its own warm hit is in the default tier's IREE tests): the slow tier
    pytest.param("aot-inductor,inductor,iree", marks=pytest.mark.slow),
])
def test_later_processes_of_a_cold_cell_load_the_first_ones_artifact(tmp_path, backends):
    """--processes 2 in a cold run: the first process compiles from nothing into a store made
    for the cell, the second loads it through the backend's own warm path and only times."""
    proc = run_cli("--backends", backends, *COMMON, "--processes", "2", "--output-dir", tmp_path, "--no-history")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for backend, cell in _cells(tmp_path).items():
        if backend == "eager":
            continue
        first, warm = cell["processes"]
        assert cell["cache"] == first["cache"] == "cold", backend
        assert warm["cache"] == "hit" and cell["warm_cache"] == "hit", (backend, warm)
        for phase in BUILD_PHASES.get(backend, ()):
            assert warm["compile_phases"][phase] == 0.0 < first["compile_phases"][phase], (backend, phase)
        assert cell["warm_start_s"] == warm["compile_s"] < first["compile_s"], backend
        assert cell["numerics_ok"] is True and len(cell["process_samples"]) == 2
    assert not list(tmp_path.glob("**/artifact.json"))  # the cell's store is gone with the run
