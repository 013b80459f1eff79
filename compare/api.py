"""The Python API, for notebooks and scripts: the same run as ``python -m compare``.

    import compare
    results = compare.run(backends=["ort"], workloads=["mlp"], size="small", time_budget=1)
    frame = results.to_pandas()          # one row per cell, the columns of results.csv
    again = compare.load(results_dir)    # a run folder (or its results.json) read back
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from compare.results.schema import RunResults


def run(**options: Any) -> RunResults:
    """Run ``python -m compare run`` with these options and return its results.
    Each keyword is a CLI flag (``time_budget=1`` is ``--time-budget 1``); lists become
    comma-separated, ``True`` a bare flag. Bad options raise ``ValueError`` with the
    CLI's one-line message; failed cells are in the results, as in the CLI."""
    from compare import cli
    from compare.config import UsageError, make_config
    from compare.harness.runner import Runner
    from compare.report.outputs import write_outputs

    try:
        config = make_config(cli.parse(["run", *_argv(options)]))
    except (UsageError, ValueError) as exc:
        raise ValueError(str(exc)) from None
    return Runner(config, write=write_outputs).run()


def load(run_dir: str | Path) -> RunResults:
    """A finished (or interrupted) run, older schemas migrated, derived figures filled."""
    import compare.scenarios  # noqa: F401  (registers each scenario's figures and CSV columns)
    from compare.results.derived import fill_derived

    results = RunResults.load(run_dir)
    fill_derived(results)
    return results


def _argv(options: dict[str, Any]) -> list[str]:
    argv = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is not None and value is not False:
            argv += [flag, ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)]
    return argv
