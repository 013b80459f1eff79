"""Command line: ``python -m compare [run] --backends inductor,ort ...``.

Exit codes: 0 every cell measured and agreeing with eager; 1 some cell failed,
timed out, ran out of memory or disagreed numerically (everything is still
written); 2 bad input; 74 the output folder became unwritable mid-run (disk
full: the last saved results stay intact); 130 interrupted by Ctrl-C, 143 by SIGTERM.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import importlib
import importlib.util
import re
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Sequence

EXIT_OK, EXIT_CELL_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_OUTPUT = 74  # sysexits EX_IOERR: the output folder could not be written
EXIT_SIGINT, EXIT_SIGTERM = 130, 143
DEFAULT_BACKENDS = "inductor,ort,tvm,iree"
DEFAULT_PAPER_BACKENDS = "inductor,ort,tvm-untuned,tvm,iree"
SUBCOMMANDS = ("run", "paper", "list", "report", "diff", "history", "overhead", "tuning-logs", "reference", "noise")


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not a usage wall
        raise UsageError(message)


def _csv(value: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return items


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be positive")
    return number


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not (number > 0) or number == float("inf"):
        raise argparse.ArgumentTypeError(f"{value!r} must be a positive finite number")
    return number


def _batch_list(value: str) -> list[int]:
    batches = [_positive_int(v) for v in _csv(value)]
    if len(set(batches)) != len(batches):
        raise argparse.ArgumentTypeError(f"{value!r} lists a batch size twice")
    return batches


def _dtype_list(value: str) -> list[str]:
    from .measure import DTYPE_NAMES

    dtypes = _csv(value)
    for d in dtypes:
        if d not in DTYPE_NAMES:
            raise argparse.ArgumentTypeError(f"unknown dtype {d!r} (known: {', '.join(DTYPE_NAMES)})")
    if len(set(dtypes)) != len(dtypes):
        raise argparse.ArgumentTypeError(f"{value!r} lists a dtype twice")
    return dtypes


def _add_run_arguments(parser: argparse.ArgumentParser, default_backends: str, numerics_draws: int,
                       processes: int = 1) -> None:
    _add_selection(parser, default_backends)
    _add_execution(parser)
    _add_backend_options(parser)
    _add_timing(parser, numerics_draws, processes)
    _add_conditions(parser)
    _add_outputs(parser)


def _add_selection(parser: argparse.ArgumentParser, default_backends: str) -> None:
    """What runs: backends, workloads, sizes, batches, precisions, device."""
    from workloads import SIZES, SUITES

    parser.add_argument("--backends", type=_csv, default=_csv(default_backends),
                     help=f"comma-separated backends to compare with eager (default: {default_backends})")
    parser.add_argument("--workloads", type=_csv, default=None,
                        help="comma-separated workloads from any suite (default: the --suite's)")
    parser.add_argument("--suite", choices=SUITES, default="paper",
                        help="built-in workloads to run: paper (the survey's five graphs), models "
                             "(ResNet, MobileNetV2, BERT, GPT-2, ViT) or all (default: paper)")
    parser.add_argument("--batch", type=_batch_list, default=[], metavar="N[,N...]",
                        help="batch sizes to sweep, each its own cell (default: each workload's own)")
    parser.add_argument("--dtype", type=_dtype_list, default=["fp32"], metavar="fp32|bf16|fp16[,...]",
                        help="precision of weights and inputs, comma-separated to sweep (default fp32)")
    parser.add_argument("--workload-file", action="append", default=[], metavar="PATH",
                     help="Python file defining extra workloads (run as code); repeatable")
    parser.add_argument("--size", choices=SIZES, default="default")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")


def _add_execution(parser: argparse.ArgumentParser) -> None:
    """How cells run: threads, limits, where results, caches and logs go."""
    from .runner import RunConfig

    parser.add_argument(
        "--threads", type=_positive_int, default=None, help="threads for every backend (default: all cores)"
    )
    parser.add_argument("--timeout", type=_positive_float, default=RunConfig.timeout_s,
                        help=f"seconds per cell before it is killed (default {RunConfig.timeout_s:g})")
    parser.add_argument("--memory-limit", type=_positive_int, default=None, metavar="MB",
                     help="address-space limit per worker (cells over it are out_of_memory)")
    parser.add_argument("--output-dir", default=None, help="where results go (default: reports/<timestamp>/)")
    parser.add_argument("--cache", choices=("cold", "warm"), default="cold",
                     help="cold: compile from nothing; warm: reuse persistent compile artifacts")
    parser.add_argument("--tuning-logs", default="tuning_logs", metavar="DIR", help="persistent tuning logs and caches")


def _add_timing(parser: argparse.ArgumentParser, numerics_draws: int, processes: int) -> None:
    """How latency and numerics are sampled."""
    from .measure import TimingConfig
    from .runner import RunConfig

    parser.add_argument("--time-budget", type=_positive_float, default=TimingConfig.budget_s, metavar="S",
                     help="soft budget in seconds for sampling one cell's latency")
    parser.add_argument("--min-samples", type=_positive_int, default=TimingConfig.min_samples)
    parser.add_argument("--sample-warmup", choices=("on", "off"), default="on",
                        help="one untimed call before each timed sample, so that no sample pays for what the "
                             "other callable left behind (default on; off: the method before 2026-11)")
    parser.add_argument("--interleave", choices=("on", "off"), default="on",
                        help="time the cells of a workload in turns, so that they and the eager-only reference "
                             "sample the same stretch of time (default on; local executor)")
    parser.add_argument("--processes", type=_positive_int, default=processes, metavar="K",
                        help=f"fresh worker processes per cell, samples pooled across them (default {processes})")
    parser.add_argument("--reference-processes", type=_positive_int, default=RunConfig.reference_processes,
                        metavar="K",
                        help="at least K processes for the eager-only reference, pooled, so that one process's "
                             "offset does not shift every comparison with it (default 3)")
    parser.add_argument("--numerics-draws", type=_positive_int, default=numerics_draws, metavar="K",
                        help=f"fresh input draws for the numerics check, worst case kept (default {numerics_draws})")


def _add_conditions(parser: argparse.ArgumentParser) -> None:
    """Run conditions recorded with the results: seed, allocator, thread spin, executor."""
    from .allocators import ALLOCATORS, DEFAULT_ALLOCATOR

    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--allocator", choices=ALLOCATORS, default=DEFAULT_ALLOCATOR,
                        help="malloc of every worker: system (glibc defaults), glibc-tuned (heap-only, no trim), "
                             "jemalloc or tcmalloc (preloaded), auto: tcmalloc if installed, else glibc-tuned "
                             f"(default {DEFAULT_ALLOCATOR})")
    parser.add_argument("--system-malloc", action="store_true", help="same as --allocator system")
    parser.add_argument("--thread-spin", choices=("short", "default"), default="short",
                        help="idle OpenMP and TVM pool threads spin about 0.3 ms (short) or as long as each "
                             "runtime's default before sleeping (default: short)")
    parser.add_argument("--executor", choices=("local", "ray"), default="local",
                        help="local: cells one after another here; ray: one Ray task per cell")
    parser.add_argument("--ray-address", default=None, metavar="ADDR",
                        help="Ray cluster to join (default: start a local Ray instance)")
    parser.add_argument("--ray-share-cores", action="store_true",
                        help="let timed cells share a node's cores (default: each task reserves --threads CPUs)")


def _add_outputs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--history", default=None, metavar="DB",
                        help="SQLite run history (default: history.sqlite beside the output folder)")
    parser.add_argument("--no-history", action="store_true", help="do not record this run in the history")
    parser.add_argument("--keep-work-dirs", action="store_true", help="keep each worker's scratch folder")
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    parser.add_argument("--list", action="store_true", help="list workloads and backends, then exit")
    parser.add_argument("--resume", default=None, metavar="RUN_DIR",
                        help="finish an interrupted run: only missing cells and transient failures run again")


_OPTION_TYPES = {"positive_int": _positive_int, "positive_float": _positive_float}


def _add_backend_options(parser: argparse.ArgumentParser) -> None:
    """Every backend's flagged options (``adapters.base.option``); a flag two backends
    share (``--cuda-arch``) is offered once."""
    from adapters import backend_classes

    seen: set[str] = set()
    for cls in backend_classes().values():
        for f in cls.options_type.cli_fields():
            meta = f.metadata
            if meta["flag"] in seen:
                continue
            seen.add(meta["flag"])
            kwargs: dict = {"dest": f.name, "help": meta["help"]}
            if meta["kind"] == "flag":
                kwargs["action"] = "store_true"
            elif meta["kind"] == "switch":
                kwargs.update(choices=("on", "off"), default="on" if f.default else "off")
            else:
                kwargs.update(default=f.default, choices=meta["choices"], metavar=meta["metavar"],
                              type=_OPTION_TYPES.get(meta["kind"]))
            parser.add_argument(f"--{meta['flag']}", **{k: v for k, v in kwargs.items() if v is not None})


def backend_options(args: argparse.Namespace) -> dict:
    """The run's ``config.options``: every backend option by field name (switches as bools)."""
    from adapters import backend_classes

    options = {}
    for cls in backend_classes().values():
        for f in cls.options_type.cli_fields():
            value = getattr(args, f.name)
            options[f.name] = value == "on" if f.metadata["kind"] == "switch" else value
    return options


def build_parser() -> argparse.ArgumentParser:
    from workloads import SIZES

    parser = _Parser(prog="python -m compare", description="Compare deep-learning compilers on the same workloads.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    run = sub.add_parser("run", help="measure workloads x backends (the default command)")
    _add_run_arguments(run, DEFAULT_BACKENDS, numerics_draws=1)
    run.add_argument("--roofline", action="store_true", help="measure this machine's ceilings and place every cell")

    paper = sub.add_parser("paper", help="the survey's section-7 experiments, with its figures beside this run's")
    _add_run_arguments(paper, DEFAULT_PAPER_BACKENDS, numerics_draws=5, processes=3)
    paper.add_argument("--dynamic-sizes", type=_positive_int, default=4, metavar="K",
                       help="distinct sizes of the varying dimension (default 4)")
    paper.add_argument("--dynamic-calls", type=_positive_int, default=40, metavar="N",
                       help="calls in the shape sequence (default 40)")
    paper.add_argument("--skip-dynamic", action="store_true", help="leave out the dynamic-shape experiment")

    lst = sub.add_parser("list", help="list workloads and backends with their availability")
    lst.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    lst.add_argument("--size", choices=SIZES, default="default")
    lst.add_argument("--workload-file", action="append", default=[], metavar="PATH")

    rep = sub.add_parser("report", help="rewrite summary.md, results.csv and report.html from results.json")
    rep.add_argument("run_dir")

    dif = sub.add_parser("diff", help="compare two runs with noise-aware verdicts")
    dif.add_argument("base")
    dif.add_argument("new")
    dif.add_argument("--fail-on-regression", type=float, default=None, metavar="PCT",
                     help="exit 1 if a cell is slower beyond noise and by more than PCT percent")
    dif.add_argument("--min-effect", type=float, default=2.0, metavar="PCT",
                     help="shifts smaller than this are 'unchanged' even when the CI is tight (default 2)")
    dif.add_argument("--output-dir", default=None, help="where diff.md/diff.html go (default: the NEW run's folder)")

    ref = sub.add_parser("reference", help="how steady the eager reference was in one or more runs")
    ref.add_argument("runs", nargs="+", metavar="RUN_DIR")
    ref.add_argument("--positions", action="store_true",
                     help="also split each cell's samples by what ran just before them")

    his = sub.add_parser("history", help="runs recorded in the history database, or one figure over time")
    his.add_argument("--db", default=str(Path("reports") / "history.sqlite"))
    his.add_argument("--workload")
    his.add_argument("--backend")

    from . import tuning_logs

    tuning_logs.add_parser(sub)

    noi = sub.add_parser("noise", help="benchmark: how much this machine's speed changes from second to second")
    noi.add_argument("--seconds", type=_positive_float, default=20.0)

    ovh = sub.add_parser("overhead", help="benchmark: the harness's timing vs a bare perf_counter loop")
    ovh.add_argument("--repeats", type=_positive_int, default=15)
    return parser


def parse(argv: Sequence[str]) -> argparse.Namespace:
    argv = list(argv)
    # The bare form is "run": python -m compare --backends inductor,ort
    if not argv or argv[0] not in SUBCOMMANDS + ("-h", "--help"):
        argv = ["run"] + argv
    args = build_parser().parse_args(argv)
    args.explicit = {tok.split("=", 1)[0] for tok in argv if tok.startswith("--")}
    return args


def main(argv: Sequence[str] | None = None) -> int:
    from adapters.base import BackendUnavailable  # noqa: F401  (import check: fail early if broken)
    from workloads import WorkloadError

    from .results import ResultsError
    from .runner import OutputError
    from .tuning_logs import TuningLogsUsage

    try:
        args = parse(sys.argv[1:] if argv is None else argv)
        if getattr(args, "list", False):
            return cmd_list(args)
        return COMMANDS.get(args.command, cmd_run)(args)
    except (UsageError, WorkloadError, ResultsError, TuningLogsUsage) as exc:
        print(f"compare: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OutputError as exc:
        print(f"compare: error: {exc}", file=sys.stderr)
        return EXIT_OUTPUT


def cmd_history(args: argparse.Namespace) -> int:
    from . import history

    try:
        return history.run(args, wide_console())
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except sqlite3.DatabaseError as exc:
        raise UsageError(f"{args.db}: not a readable history database ({exc})") from None


def _module_command(module: str, *fields: str):
    """A subcommand run by ``compare.<module>.run(args, console)`` or, with ``fields``,
    by ``compare.<module>.main(*those args)``."""
    def run(args: argparse.Namespace) -> int:
        target = importlib.import_module(f"compare.{module}")
        return target.main(*(getattr(args, f) for f in fields)) if fields else target.run(args, wide_console())
    return run


# ----------------------------------------------------------------------------- run

def _fresh_run_dir(root: Path) -> Path:
    """reports/<timestamp>[-N]: created exclusively, so two runs started in the same
    second never share (and overwrite) one folder."""
    _check_output_dir(root)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        candidate = root / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise UsageError(f"cannot create a fresh run folder under {root}")


def _check_output_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"output dir {path} is not writable ({exc.strerror or exc})") from None


def make_config(args: argparse.Namespace, output_dir: Path | None = None):
    """The run's RunConfig from the command line; every bad input is a UsageError (or a
    WorkloadError) in one line, before anything runs."""
    from .environment import available_cores
    from .runner import RunConfig

    backends = _checked_backends(args.backends)
    workloads = _checked_workloads(args)
    _check_options(args)
    allocator, malloc_env = _allocator(args)
    return RunConfig(
        backends=backends,
        workloads=[w.name for w in workloads],
        size=args.size,
        device=args.device,
        threads=args.threads or available_cores(),
        timeout_s=args.timeout,
        memory_limit_mb=args.memory_limit,
        cache=args.cache,
        cache_root=str(Path(args.tuning_logs)),
        output_dir=str(_output_dir(args, output_dir)),
        workload_files=[str(Path(f).resolve()) for f in args.workload_file],
        seed=args.seed,
        timing={"budget_s": args.time_budget, "min_samples": args.min_samples,
                "sample_warmup": args.sample_warmup == "on"},
        options=backend_options(args),
        keep_work_dirs=args.keep_work_dirs,
        numerics_draws=args.numerics_draws,
        processes=args.processes,
        reference_processes=args.reference_processes,
        batches=list(args.batch),
        dtypes=list(args.dtype),
        suite=args.suite,
        executor=args.executor,
        ray_address=args.ray_address,
        ray_share_cores=args.ray_share_cores,
        roofline=getattr(args, "roofline", False) or args.command == "paper",
        allocator=allocator,
        malloc_env=malloc_env,
        thread_spin=args.thread_spin,
        interleave=args.interleave == "on" and args.executor == "local",
    )


def _checked_backends(names: list[str]) -> list[str]:
    """Eager first (the reference), then the others, each known and listed once."""
    from adapters import backend_names

    known = backend_names()
    backends = ["eager"] + [b for b in names if b != "eager"]
    for b in backends:
        if b not in known:
            raise UsageError(f"unknown backend {b!r} (known: {', '.join(known)})")
    if len(set(backends)) != len(backends):
        raise UsageError("a backend is listed twice in --backends")
    return backends


def _checked_workloads(args: argparse.Namespace) -> list:
    from workloads import resolve_workloads

    names = list(dict.fromkeys(args.workloads)) if args.workloads else None  # each workload once
    workloads = resolve_workloads(names, args.workload_file, args.suite)  # WorkloadError on bad names/files
    for w in workloads:
        for batch in args.batch if w.batch_param else [None]:
            w.with_batch(batch).input_specs(args.size)  # a bad size is a usage error, not a failed cell
    if args.batch and not any(w.batch_param for w in workloads):
        raise UsageError("--batch: none of the chosen workloads has a batch dimension")
    return workloads


def _check_options(args: argparse.Namespace) -> None:
    if args.cuda_arch and not re.fullmatch(r"sm_\d{2,3}a?", args.cuda_arch):
        raise UsageError(f"--cuda-arch {args.cuda_arch!r} is not of the form sm_XY (e.g. sm_80)")
    if args.executor == "ray" and importlib.util.find_spec("ray") is None:
        raise UsageError("--executor ray needs Ray: pip install -e '.[ray]'")


def _allocator(args: argparse.Namespace) -> tuple[str, dict[str, str]]:
    from .allocators import AllocatorMissing, allocator_env, resolve

    allocator = resolve("system" if args.system_malloc else args.allocator)
    try:
        return allocator, allocator_env(allocator)
    except AllocatorMissing as exc:
        raise UsageError(str(exc)) from None


def _output_dir(args: argparse.Namespace, output_dir: Path | None) -> Path:
    """The run's folder: the resumed one, the one asked for, or a fresh reports/<timestamp>/."""
    if output_dir is None and not args.output_dir:
        return _fresh_run_dir(Path("reports"))
    output_dir = output_dir if output_dir is not None else Path(args.output_dir)
    _check_output_dir(output_dir)
    return output_dir


def resume_state(args: argparse.Namespace):
    """The stored run, its config and how many transient cells run again; refuses
    (UsageError) when what was asked or the machine no longer matches the run
    (``compare.resume``)."""
    from . import environment
    from .results import RunResults
    from .resume import ResumeRefused, plan_resume
    from .runner import RunConfig

    stored = RunResults.load(args.resume)
    try:
        config = RunConfig(**stored.config)
    except TypeError as exc:
        raise UsageError(f"{args.resume}: its config cannot be resumed by this dlcompare ({exc})") from None
    config.output_dir = str(Path(args.resume))
    requested = make_config(args, output_dir=Path(args.resume))
    try:
        plan = plan_resume(stored, config, requested, args.explicit, environment.capture(config.threads, config.device))
    except ResumeRefused as exc:
        raise UsageError(f"cannot resume {args.resume}: {exc}") from None
    return plan.results, plan.config, plan.rerun


def cmd_run(args: argparse.Namespace, paper: bool = False) -> int:
    from rich.console import Console

    from .report import problems, rich_geomean_table, rich_table
    from .runner import RunInterrupted, Runner

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
    runner = Runner(config, progress)

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
                runner.run_dynamic(results, [b for b in config.backends if b != "eager"],
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
    geo = rich_geomean_table(results)
    if geo is not None:
        out.print(geo)
    issues = problems(results)
    for line in issues:
        out.print(f"[red]problem:[/red] {line}", highlight=False)
    if paper:
        out.print(f"paper comparison: {Path(config.output_dir) / 'paper.md'}", highlight=False)
    out.print(f"report: {Path(config.output_dir) / 'report.html'}", highlight=False)
    out.print(f"results: {Path(config.output_dir) / 'results.json'}", highlight=False)
    # Unavailable backends are reported, not failures: the run did what it could.
    failed = [c for c in results.cells if c.status not in ("ok", "unavailable") or c.numerics_ok is False]
    return EXIT_CELL_FAILED if failed else EXIT_OK


class RichProgress:
    """Which cell, which phase: a live line on stderr while the run goes."""

    def __init__(self, console):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
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
        self._progress.advance(self._task)


def finalize_outputs(results, config, args, console) -> None:
    """report.html, paper.md and the history entry: written from the saved results;
    a failure here is reported but never touches results.json."""
    if results is None:
        return
    from .html_report import write_html

    out_dir = Path(config.output_dir)
    try:
        write_html(results, out_dir)
        if args.command == "paper":
            from .paper import write_paper

            write_paper(results, out_dir)
    except Exception as exc:  # a plotting bug must not cost the measured results
        console.print(f"[yellow]warning:[/yellow] report not written: {type(exc).__name__}: {exc}")
    if not args.no_history:
        from .history import record_run

        db = Path(args.history) if args.history else out_dir.resolve().parent / "history.sqlite"
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
    from workloads import resolve_workloads

    console = wide_console()
    wt = Table(title=f"workloads (size {args.size})")
    for col in ("name", "suite", "description", "inputs", "batch dim", "dynamic dims", "source"):
        wt.add_column(col, overflow="fold")
    for w in resolve_workloads(None, args.workload_file, "all"):
        specs = w.input_specs(args.size)
        suite = next((t for t in w.tags if t in ("paper", "models")), "-")
        wt.add_row(
            w.name, suite, w.description,
            "; ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in specs),
            f"{w.batch_param}={w.batch_of(args.size)}" if w.batch_param else "-",
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

    from .derived import fill_derived
    from .html_report import write_html
    from .report import rich_geomean_table, rich_table, write_tables
    from .results import RunResults

    results = RunResults.load(args.run_dir)
    fill_derived(results)  # derived figures follow the measured ones (and migrated files get them)
    run_dir = Path(args.run_dir)
    if run_dir.is_file():
        run_dir = run_dir.parent
    write_tables(results, run_dir)
    write_html(results, run_dir)
    if "dynamic_shapes" in results.experiments or "roofline_ceilings" in results.experiments:
        from .paper import write_paper

        write_paper(results, run_dir)
    console = wide_console()
    console.print(rich_table(results))
    geo = rich_geomean_table(results)
    if geo is not None:
        console.print(geo)
    return EXIT_OK


# The subcommands other than run (the default) and list.
COMMANDS = {
    "paper": lambda args: cmd_run(args, paper=True),
    "report": lambda args: cmd_report(args),
    "diff": _module_command("diff"),
    "reference": _module_command("reference"),
    "history": cmd_history,
    "tuning-logs": _module_command("tuning_logs"),
    "noise": _module_command("noise", "seconds"),
    "overhead": _module_command("overhead", "repeats"),
    "list": lambda args: cmd_list(args),
}
