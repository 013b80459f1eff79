import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compare.cli import subcommands

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


# Timing flags for tests that check behaviour, not speed: a short budget, few samples.
FAST = ["--time-budget", "0.2", "--min-samples", "3", "--reference-processes", "1"]
# A run in a test has one process per cell and no noise probe unless the test asks for
# them (the default is 3 processes and a probe of 3 s before and after the cells).
TEST_RUN_DEFAULTS = {"--processes": "1", "--noise-probe": "0"}
OTHER_SUBCOMMANDS = tuple(c for c in subcommands() if c != "run")


def with_test_defaults(args) -> list[str]:
    """``args`` of a ``python -m compare`` call, with the test defaults for a plain run."""
    args = [str(a) for a in args]
    if args and args[0] in OTHER_SUBCOMMANDS:
        return args
    given = {a.split("=", 1)[0] for a in args}
    return args + [x for flag, value in TEST_RUN_DEFAULTS.items() if flag not in given for x in (flag, value)]


def run_cli(*args, cwd=None, timeout=900, env=None):
    """Run ``python -m compare ARGS`` as a user would; returns CompletedProcess."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "compare", *with_test_defaults(args)],
        cwd=cwd or ROOT, capture_output=True, text=True, timeout=timeout, env=full_env,
    )


def load_results(run_dir, flat=True):
    """A run's results.json as JSON; ``flat``: each cell's sections' fields at its top level
    (the names results.csv and schema 8 used), so that a test reads ``cell["peak_rss_mb"]``."""
    from compare.results.sections import flatten

    data = json.loads((Path(run_dir) / "results.json").read_text())
    return dict(data, cells=[flatten(c) for c in data["cells"]]) if flat else data


def tiny_spec(backend, tmp_path, workload="tiny_linear", size="small", batch=None, dtype="fp32", dynamic=None,
              **config):
    """A worker's spec for a fixture workload, made as the harness makes it
    (``CellSpecs.spec`` from a ``RunConfig``), in a work dir under ``tmp_path``: a test
    that built specs by hand could not catch the two sides drifting apart."""
    import dataclasses

    from compare.harness.cells import CellSpecs
    from compare.harness.runner import RunConfig
    from workloads import resolve_workloads

    files = [str(FIXTURES / "tiny_workloads.py")]
    config.setdefault("timing", {"budget_s": 0.05, "min_samples": 3})
    run = RunConfig(backends=[backend], workloads=[workload], size=size, workload_files=files,
                    cache_root=str(tmp_path / "store"), **config)
    (found,) = resolve_workloads([workload], files)
    spec = CellSpecs(run).spec(found, backend, batch, dtype, dynamic=dynamic)
    return dataclasses.replace(spec, work_dir=str(tmp_path))


@pytest.fixture
def fixtures_dir():
    return FIXTURES


def pytest_sessionfinish(session):
    """An xdist worker hands its fault counts to the controller, which prints the table."""
    from faults import INJECTED, LOST

    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["faults"] = json.dumps({"injected": INJECTED, "lost": LOST})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    from faults import INJECTED, LOST

    counts = json.loads(getattr(node, "workeroutput", {}).get("faults", "{}"))
    for kind, n in counts.get("injected", {}).items():
        INJECTED[kind] += n
    for kind, n in counts.get("lost", {}).items():
        LOST[kind] += n


def pytest_terminal_summary(terminalreporter):
    from faults import INJECTED, LOST

    if not INJECTED:
        return
    terminalreporter.section("fault injection")
    terminalreporter.write_line(f"{'fault':<58} {'injected':>8} {'results lost':>12}")
    for kind in sorted(INJECTED):
        terminalreporter.write_line(f"{kind:<58} {INJECTED[kind]:>8} {LOST[kind]:>12}")
