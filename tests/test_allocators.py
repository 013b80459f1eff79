"""--allocator is a recorded run condition that every worker really runs under."""
import pytest

from compare import cli
from compare.harness import allocators
from conftest import FIXTURES, load_results, run_cli

COMMON = ["--backends", "eager", "--workload-file", FIXTURES / "faulty_workloads.py", "--workloads", "fine",
          "--size", "small", "--time-budget", "0.2", "--min-samples", "3", "--processes", "1", "--noise-probe", "0"]


@pytest.mark.unit
def test_allocator_environments():
    assert allocators.allocator_env("system") == {}
    assert allocators.allocator_env("glibc-tuned") == allocators.GLIBC_TUNED_ENV
    with pytest.raises(allocators.AllocatorMissing, match="unknown allocator"):
        allocators.allocator_env("hoard")


@pytest.mark.unit
def test_auto_is_the_mimalloc_the_install_brings_and_glibc_tuned_without_it(monkeypatch):
    """The README's install gives every worker the same allocator whatever the system has
    (issue 43: without tcmalloc, a new user's workers ran glibc-tuned and the intervals missed)."""
    library = allocators.find_library("mimalloc")
    assert library is not None and library.name == "libmimalloc.so.3"  # a dependency of dlcompare
    assert allocators.resolve("auto") == "mimalloc"
    assert allocators.allocator_env("mimalloc") == {"LD_PRELOAD": str(library), "MIMALLOC_PURGE_DELAY": "-1"}
    monkeypatch.setattr(allocators, "wheel_library", lambda *a: None)
    assert allocators.resolve("auto") == "glibc-tuned"


@pytest.mark.unit
def test_a_missing_library_is_a_one_line_usage_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(allocators, "find_library", lambda name: None)
    code = cli.main(["--allocator", "jemalloc", *map(str, COMMON), "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "libjemalloc.so.2 not found" in err[0] and "apt-get install libjemalloc2" in err[0]


@pytest.mark.parametrize("name", ["system", "jemalloc", "tcmalloc", "mimalloc"])
def test_workers_run_under_the_chosen_allocator(name, tmp_path, monkeypatch):
    if name != "system" and allocators.find_library(name) is None:
        pytest.skip(f"{name} is not installed here")
    # Whatever the parent inherited, the workers get the run's allocator.
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")
    proc = run_cli(*COMMON, "--allocator", name, "--output-dir", tmp_path, env={"MALLOC_ARENA_MAX": "2"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = load_results(tmp_path)
    (cell,) = data["cells"]
    assert len(cell["process_samples"]) == 1  # alone, the reference is compared with nothing: one process
    assert data["environment"]["allocator"] == name
    if name == "system":
        assert cell["allocator"] == "glibc"  # no MALLOC_* setting reached the worker
    else:
        assert cell["allocator"] == name
        if name == "jemalloc":
            assert data["environment"]["worker_env"]["MALLOC_CONF"] == allocators.JEMALLOC_CONF
    summary = (tmp_path / "summary.md").read_text()
    assert f"allocator {name}" in summary and "(1 for the reference)" in summary  # as the cells ran, not as asked
