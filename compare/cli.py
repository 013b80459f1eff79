"""Command line: ``python -m compare [run] --backends inductor,ort ...``.

Exit codes: 0 every cell measured and agreeing with eager; 1 some cell failed,
timed out, ran out of memory or disagreed numerically (everything is still
written); 2 bad input; 74 the output folder became unwritable mid-run (disk
full: the last saved results stay intact); 130 interrupted by Ctrl-C, 143 by SIGTERM.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from adapters import CommandUsage, backend_subcommands
from compare.commands import cmd_history, cmd_list, cmd_report, cmd_run, module_command, wide_console
from compare.config import COMMAND_DEFAULTS, UsageError, make_config  # noqa: F401  (make_config: the API and tests build configs here)
from compare.harness.run_config import (
    CHECKED,
    GROUPS,
    NEUTRAL,
    OVERRIDABLE,
    REFUSED,
    flagged_fields,
    parse_keywords,
    positive_float,
    positive_int,
)

EXIT_USAGE = 2
EXIT_OUTPUT = 74  # sysexits EX_IOERR: the output folder could not be written
SUBCOMMANDS = ("run", "paper", "list", "report", "diff", "history", "overhead", "reference", "noise",
               "explain", "crosscheck", "bisect", "stability", "system")  # and those backends bring (Backend.subcommand)


Arguments = argparse._ActionsContainer  # a parser or one of its argument groups


def _arg(parser: Arguments, flag: str, *, resume: str, field: str | None = None, copy: bool = False,
         **kwargs) -> argparse.Action:
    """One flag of a run: argparse's keywords, its resume policy and the ``RunConfig`` field
    it fills (``field``, which resume compares or sets); ``copy``: the field is the parsed
    value as it is (``make_config`` derives the others). Called for every flagged RunConfig
    field (``compare.harness.run_config.run_option``) and for the flags without one."""
    if (resume in (CHECKED, OVERRIDABLE) or copy) and field is None:
        raise ValueError(f"{flag}: a {resume} option names its RunConfig field")
    action = parser.add_argument(flag, **kwargs)
    action.resume = (resume, field)  # type: ignore[attr-defined]
    action.copied = copy  # type: ignore[attr-defined]
    return action


def _declare_copies(parser: argparse.ArgumentParser) -> None:
    """The (dest, RunConfig field) of every option copied as parsed, for ``make_config``."""
    parser.set_defaults(copied_fields=tuple((a.dest, a.resume[1]) for a in parser._actions
                                            if getattr(a, "copied", False)))


def resume_policy(parser: argparse.ArgumentParser, command: str = "run") -> dict[str, tuple[str, str | None]]:
    """``--flag`` -> (policy, RunConfig field) for every option of ``command`` that declares one."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {flag: action.resume for action in sub.choices[command]._actions if hasattr(action, "resume")
            for flag in action.option_strings}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not a usage wall
        raise UsageError(message)


class _Removed(argparse.Action):
    """A flag that said what another already says: a one-line error that names the other."""

    def __init__(self, option_strings, dest, replacement: str, **kwargs):
        super().__init__(option_strings, dest, nargs=0, help=argparse.SUPPRESS)
        self.replacement = replacement

    def __call__(self, parser, namespace, values, option_string=None):
        raise UsageError(f"{option_string} is gone: use {self.replacement}")


def _add_run_arguments(parser: argparse.ArgumentParser, command: str) -> dict[str, Arguments]:
    """The run's options in sections, as ``--help`` prints them: every flagged RunConfig
    field (``compare.harness.run_config``), then the flags that fill no field of their own;
    returns the sections by name."""
    groups = {name: parser.add_argument_group(name, text) for name, text in GROUPS.items()}
    for f in flagged_fields(command):
        meta = f.metadata
        _arg(groups[meta["group"]], meta["flag"], resume=meta["resume"], field=f.name, copy=not meta["derived"],
             **parse_keywords(f))
    _add_unfielded(groups)
    _add_backend_options(parser.add_argument_group("backend options", "each backend's own settings (adapters' options)"))
    return groups


def _add_unfielded(groups: dict[str, Arguments]) -> None:
    """The flags that fill no RunConfig field of their own: a second way to a field
    (``--model``), the sampler's settings (the ``timing`` field), the scenarios' options,
    this command's own (history, progress, resuming) and the flags that are gone."""
    from compare.measure.timing import TimingConfig
    from compare.scenarios import scenarios

    _arg(groups["selection"], "--model", resume=CHECKED, field="workload_files", action="append", default=[],
         metavar="SPEC", help="a model as you have it: hf:ZOO_NAME|CONFIG.json|DIR, timm:NAME, torchvision:NAME or "
                              "pt2:PATH, seeded random weights unless DIR holds safetensors; never downloads; repeatable")
    sampling = groups["sampling"]
    _arg(sampling, "--time-budget", resume=OVERRIDABLE, field="timing", type=positive_float,
         default=TimingConfig.budget_s, metavar="S", help="soft budget in seconds for sampling one cell's latency")
    _arg(sampling, "--min-samples", resume=OVERRIDABLE, field="timing", type=positive_int, default=None, metavar="N",
         help=f"samples per cell before the stopping rule may stop it (default {TimingConfig.min_samples}, "
              "1 with --suite zoo: a call slower than the time budget is timed in one round)")
    _arg(sampling, "--sample-warmup", resume=OVERRIDABLE, field="timing", choices=("on", "off"), default="on",
         help="one untimed call before each timed sample, so that no sample pays for what the "
              "other callable left behind (default on; off: the method before 2026-11)")
    for each in scenarios().values():
        each.add_options(_ScenarioOptions(sampling))
    _arg(groups["conditions"], "--system-malloc", resume=REFUSED, action=_Removed, replacement="--allocator system")
    outputs = groups["outputs"]
    _arg(outputs, "--history", resume=NEUTRAL, default=None, metavar="DB",
         help="SQLite run history (default: history.sqlite beside the output folder)")
    _arg(outputs, "--no-history", resume=NEUTRAL, action="store_true", help="do not record this run in the history")
    _arg(outputs, "--quiet", resume=NEUTRAL, action="store_true", help="no progress display")
    _arg(outputs, "--list", resume=REFUSED, action=_Removed, replacement="python -m compare list [--device cuda]")
    _arg(outputs, "--resume", resume=NEUTRAL, default=None, metavar="RUN_DIR",
         help="finish an interrupted run: only missing cells and transient failures run again")


class _ScenarioOptions:
    """How a scenario declares its run options (``compare.scenarios.base.RunOptions``)."""

    positive_int = staticmethod(positive_int)
    positive_float = staticmethod(positive_float)

    def __init__(self, parser: Arguments):
        self.parser = parser

    def add(self, flag: str, **kwargs) -> argparse.Action:
        return _arg(self.parser, flag, resume=CHECKED, field="scenario_options", **kwargs)


_OPTION_TYPES = {"positive_int": positive_int, "positive_float": positive_float}


def _add_backend_options(parser: Arguments) -> None:
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


def build_parser() -> argparse.ArgumentParser:
    from workloads import SIZES

    parser = _Parser(prog="python -m compare", description="Compare deep-learning compilers on the same workloads.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    run = sub.add_parser("run", help="measure workloads x backends (the default command)")
    _add_run_arguments(run, "run")
    _declare_copies(run)

    paper = sub.add_parser("paper", help="the survey's section-7 experiments, with its figures beside this run's")
    _add_run_arguments(paper, "paper")
    protocol = paper.add_argument_group("the survey's protocol", "its dynamic-shape part and the fusion profiles")
    _arg(protocol, "--dynamic-sizes", resume=REFUSED, type=positive_int, default=4, metavar="K",
         help="distinct sizes of the varying dimension (default 4)")
    _arg(protocol, "--dynamic-calls", resume=REFUSED, type=positive_int, default=40, metavar="N",
         help="calls in the shape sequence (default 40)")
    _arg(protocol, "--skip-dynamic", resume=REFUSED, action="store_true", help="leave out the dynamic-shape experiment")
    _declare_copies(paper)

    lst = sub.add_parser("list", help="list workloads and backends with their availability")
    lst.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    lst.add_argument("--size", choices=SIZES, default=None, help="default: the device's (large on CUDA)")
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

    exp = sub.add_parser("explain", help="where each backend's time goes: the kernel profiles of a run made with --explain")
    exp.add_argument("run", metavar="RUN_DIR")

    cross = sub.add_parser("crosscheck", help="each cell's latency beside its backend's own benchmark tool's, "
                           "for a run made with --crosscheck")
    cross.add_argument("run", metavar="RUN_DIR")

    bis = sub.add_parser("bisect", help="the first op whose error against float64 jumps beyond eager's, and a "
                         "reproducer for it, for one cell of a run")
    bis.add_argument("run_dir", metavar="RUN_DIR")
    bis.add_argument("--cell", required=True, metavar="WORKLOAD/BACKEND", help="e.g. gpt2/iree")
    bis.add_argument("--factor", type=positive_float, default=10.0,
                     help="an op is bad when its error vs float64 exceeds this many times eager's (default 10)")
    bis.add_argument("--timeout", type=positive_float, default=3600.0, help="seconds for the whole bisect")

    his = sub.add_parser("history", help="runs recorded in the history database, or one figure over time")
    his.add_argument("--db", default=str(Path("reports") / "history.sqlite"))
    his.add_argument("--workload")
    his.add_argument("--backend")

    for command in dict.fromkeys(backend_subcommands().values()):  # a module once, its aliases with it
        command.add_parser(sub)

    stab = sub.add_parser("stability", help="how well two runs of the same plan agree: does each speedup lie "
                          "inside the other run's 95%% interval")
    stab.add_argument("base")
    stab.add_argument("new")
    stab.add_argument("--output", default=None, metavar="PATH", help="also write the table as markdown here")

    sub.add_parser("system", help="what on this machine raises timing noise, as pyperf system show reports it")

    noi = sub.add_parser("noise", help="benchmark: how much this machine's speed changes from second to second")
    noi.add_argument("--seconds", type=positive_float, default=20.0)

    ovh = sub.add_parser("overhead", help="benchmark: the harness's timing vs a bare perf_counter loop")
    ovh.add_argument("--repeats", type=positive_int, default=15)
    return parser


def subcommands() -> tuple[str, ...]:
    """Every subcommand: the project's and those the backends bring."""
    return (*SUBCOMMANDS, *backend_subcommands())


def parse(argv: Sequence[str]) -> argparse.Namespace:
    argv = list(argv)
    # The bare form is "run": python -m compare --backends inductor,ort
    if not argv or argv[0] not in (*subcommands(), "-h", "--help"):
        argv = ["run"] + argv
    parser = build_parser()
    args = parser.parse_args(argv)
    args.explicit = {tok.split("=", 1)[0] for tok in argv if tok.startswith("--")}
    if args.command in ("run", "paper"):
        args.resume_policy = resume_policy(parser, args.command)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    from adapters.base import BackendUnavailable  # noqa: F401  (import check: fail early if broken)
    from compare.harness.runner import OutputError
    from compare.results.schema import ResultsError
    from workloads import WorkloadError

    try:
        args = parse(sys.argv[1:] if argv is None else argv)
        if command := backend_subcommands().get(args.command):
            return command.run(args, wide_console())
        return COMMANDS.get(args.command, cmd_run)(args)
    except (UsageError, WorkloadError, ResultsError, CommandUsage) as exc:
        print(f"compare: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OutputError as exc:
        print(f"compare: error: {exc}", file=sys.stderr)
        return EXIT_OUTPUT


COMMANDS = {
    "paper": lambda args: cmd_run(args, paper=True),
    "report": lambda args: cmd_report(args),
    "diff": module_command("report.diff"),
    "reference": module_command("report.reference"),
    "explain": module_command("report.explain"),
    "crosscheck": module_command("report.crosscheck"),
    "stability": module_command("report.stability"),
    "system": module_command("experiments.system"),
    "bisect": module_command("bisect"),
    "history": cmd_history,
    "noise": module_command("experiments.noise", "seconds"),
    "overhead": module_command("experiments.overhead", "repeats"),
    "list": lambda args: cmd_list(args),
}
