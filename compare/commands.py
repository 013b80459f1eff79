"""The subcommands behind ``python -m compare``: run (and paper), list, report, history,
and those that live in a module of their own (diff, reference, tuning-logs, noise,
overhead)."""
from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sqlite3
import sys
from pathlib import Path

from compare.config import UsageError, make_config, resume_state

EXIT_OK, EXIT_CELL_FAILED = 0, 1
EXIT_SIGINT, EXIT_SIGTERM = 130, 143


def cmd_run(args: argparse.Namespace, paper: bool = False) -> int:
    from rich.console import Console

    from compare.harness.runner import RunInterrupted, Runner
    from compare.report.outputs import write_outputs
    from compare.report.text import problems, rich_extra_tables, rich_table

    stored = None
    if args.resume:
        stored, config, rerun = resume_state(args)
        missing = len(Runner(config).plan()) - len(stored.cells)
        print(f"compare: resuming {args.resume}: {len(stored.cells)} cell(s) kept, {missing} to run "
              f"({rerun} of them transient failures)", file=sys.stderr)
    else:
        config = make_config(args)
    console = Console(stderr=True)
    progress = None if args.quiet else RichProgress(console)
    runner = Runner(config, progress, write=write_outputs)
    if not args.quiet:
        print(f"compare: {run_estimate(runner, args, stored).line()}", file=sys.stderr)

    received = {"signal": None}

    def on_sigterm(signum, frame):
        received["signal"] = signum
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        with (progress or contextlib.nullcontext()):
            results = runner.run(stored)
        if paper and not args.skip_dynamic:
            with (RichProgress(console) if not args.quiet else contextlib.nullcontext()) as dyn_progress:
                runner.progress = dyn_progress or runner.progress
                runner.run_dynamic(results, [b for b in config.backends if b != config.reference],
                                   args.dynamic_sizes, args.dynamic_calls)
    except RunInterrupted:
        finalize_outputs(runner.last_results, config, args, console)
        which = "SIGTERM" if received["signal"] == signal.SIGTERM else "Ctrl-C"
        print(f"compare: interrupted by {which}; finished cells are saved in {config.output_dir}", file=sys.stderr)
        return EXIT_SIGTERM if received["signal"] == signal.SIGTERM else EXIT_SIGINT
    finally:
        signal.signal(signal.SIGTERM, previous)

    finalize_outputs(results, config, args, console)
    out = wide_console()
    out.print(rich_table(results))
    for table in rich_extra_tables(results):
        out.print(table)
    issues = problems(results)
    for line in issues:
        out.print(f"[red]problem:[/red] {line}", highlight=False)
    if paper:
        out.print(f"paper comparison: {Path(config.output_dir) / 'paper.md'}", highlight=False)
    out.print(f"report: {Path(config.output_dir) / 'report.html'}", highlight=False)
    out.print(f"results: {Path(config.output_dir) / 'results.json'}", highlight=False)
    # Unavailable backends are reported, not failures: the run did what it could.
    failed = [c for c in results.cells if c.status not in ("ok", "unavailable") or c.numerics.numerics_ok is False]
    return EXIT_CELL_FAILED if failed else EXIT_OK


def history_path(args: argparse.Namespace, output_dir: str) -> Path:
    return Path(args.history) if args.history else Path(output_dir).resolve().parent / "history.sqlite"


def run_estimate(runner, args: argparse.Namespace, stored):
    """How long the cells still to run will take, from what they took here before (else in
    the reference run shipped with dlcompare)."""
    from compare.harness.environment import cpu_model
    from compare.harness.estimate import estimate, past_wall_s, reference_walls

    cfg = runner.config
    plan = [cell for cell in runner.plan() if stored is None or stored.cell(*cell) is None]
    # a coverage-only cell takes what its compile takes, a timed one its budget besides:
    # each is estimated from runs of its own kind (the reference run was timed)
    past = past_wall_s(history_path(args, cfg.output_dir), cpu_model(), cfg.threads, coverage_only=cfg.coverage_only)
    if cfg.coverage_only:
        return estimate(plan, cfg.size, cfg.device, past, 0.0)
    floor_s = max(cfg.processes, 1) * float(cfg.timing.get("budget_s") or 0.0)
    return estimate(plan, cfg.size, cfg.device, past, floor_s, reference_walls(), cfg.threads, cfg.processes)


class RichProgress:
    """Which cell, which phase: a live line on stderr while the run goes."""

    def __init__(self, console):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("left"), TimeRemainingColumn(),  # from the pace of the cells done so far
            console=console, transient=False,
        )
        self._task = None
        self._label = ""

    def __enter__(self):
        self._progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self._progress.__exit__(*exc)

    def cell_started(self, index, total, workload, backend):
        self._label = f"{workload} x {backend}"
        if self._task is None:  # a resumed run starts part of the way through
            self._task = self._progress.add_task(self._label, total=total, completed=index - 1)
        self._progress.update(self._task, description=f"{self._label}: starting")

    def phase(self, workload, backend, phase):
        if self._task is not None:
            self._progress.update(self._task, description=f"{workload} x {backend}: {phase}")

    def cell_finished(self, cell):
        detail = cell.status
        if cell.status == "ok" and cell.speedup is not None:
            detail += f", {cell.speedup:.2f}x"
        elif cell.error:
            detail += f": {cell.error[:100]}"
        self._progress.console.print(f"  {cell.label} x {cell.backend}: {detail}", highlight=False)
        if self._task is not None:  # a cell can fail before any cell started (a model that cannot be built)
            self._progress.advance(self._task)


def finalize_outputs(results, config, args, console) -> None:
    """report.html, paper.md and the history entry: written from the saved results;
    a failure here is reported but never touches results.json."""
    if results is None:
        return
    from compare.report.outputs import write_outputs

    out_dir = Path(config.output_dir)
    try:
        write_outputs(results, out_dir, record=False, reports=True)  # results.json: saved by the runner
    except Exception as exc:  # a plotting bug must not cost the measured results
        console.print(f"[yellow]warning:[/yellow] report not written: {type(exc).__name__}: {exc}")
    if not args.no_history:
        from compare.results.history import record_run

        db = history_path(args, config.output_dir)
        try:
            record_run(db, results, out_dir)
        except Exception as exc:  # sqlite errors, a full disk: the run's own files are already safe
            console.print(f"[yellow]warning:[/yellow] history not recorded in {db}: {exc}")


def wide_console():
    """Tables stay readable when stdout is a file or a CI log (rich assumes 80 columns)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=200)


# ----------------------------------------------------------------------------- list / report

def cmd_list(args: argparse.Namespace) -> int:
    from rich.table import Table

    from adapters import backend_names, get_backend
    from compare.config import device_size
    from workloads import builtin_names_unique, resolve_workloads

    console = wide_console()
    # every built-in, the zoo's and the real decoders' included, then the user's files
    listed = [*builtin_names_unique().values(), *resolve_workloads(None, args.workload_file, "none")]
    size = args.size or device_size(args.device, listed)
    wt = Table(title=f"workloads (size {size})")
    for col in ("name", "suite", "description", "inputs", "batch dim", "dynamic dims", "source"):
        wt.add_column(col, overflow="fold")
    for w in listed:
        specs = w.input_specs(size)
        suite = next((t for t in w.tags if t in ("paper", "models", "llm", "zoo")), "-")
        wt.add_row(
            w.name, suite, w.description,
            "; ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in specs),
            f"{w.batch_param}={w.batch_of(size)}" if w.batch_param else "-",
            "; ".join(", ".join(f"{d}={n}" for d, n in s.dynamic_dims.items()) for s in specs),
            w.source,
        )
    console.print(wt)
    bt = Table(title=f"backends (device {args.device})")
    for col in ("name", "available", "versions", "description / reason"):
        bt.add_column(col, overflow="fold")
    for name in backend_names():
        backend = get_backend(name)
        ok, reason = backend.available(args.device)
        versions = ", ".join(f"{k} {v}" for k, v in backend.versions().items())
        bt.add_row(name, "yes" if ok else "no", versions, backend.description if ok else reason)
    console.print(bt)
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:

    from compare.report.outputs import write_outputs
    from compare.report.text import rich_extra_tables, rich_table
    from compare.results.derived import fill_derived
    from compare.results.schema import RunResults

    results = RunResults.load(args.run_dir)
    fill_derived(results)  # derived figures follow the measured ones (and migrated files get them)
    run_dir = Path(args.run_dir)
    if run_dir.is_file():
        run_dir = run_dir.parent
    write_outputs(results, run_dir, record=False, reports=True)  # results.json stays as measured
    console = wide_console()
    console.print(rich_table(results))
    for table in rich_extra_tables(results):
        console.print(table)
    return EXIT_OK


# The subcommands other than run (the default) and list.


def cmd_history(args: argparse.Namespace) -> int:
    from compare.results import history

    try:
        return history.run(args, wide_console())
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except sqlite3.DatabaseError as exc:
        raise UsageError(f"{args.db}: not a readable history database ({exc})") from None


def module_command(module: str, *fields: str):
    """A subcommand run by ``compare.<module>.run(args, console)`` or, with ``fields``,
    by ``compare.<module>.main(*those args)``."""
    def run(args: argparse.Namespace) -> int:
        target = importlib.import_module(run.module)
        return target.main(*(getattr(args, f) for f in fields)) if fields else target.run(args, wide_console())
    run.module = f"compare.{module}"  # type: ignore[attr-defined]
    run.entry = "main" if fields else "run"  # type: ignore[attr-defined]
    return run
