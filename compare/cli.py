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
from compare.harness.resume import CHECKED, NEUTRAL, OVERRIDABLE, REFUSED

EXIT_USAGE = 2
EXIT_OUTPUT = 74  # sysexits EX_IOERR: the output folder could not be written
SUBCOMMANDS = ("run", "paper", "list", "report", "diff", "history", "overhead", "reference", "noise",
               "explain", "crosscheck", "bisect", "stability", "system")  # and those backends bring (Backend.subcommand)


Arguments = argparse._ActionsContainer  # a parser or one of its argument groups


def _arg(parser: Arguments, flag: str, *, resume: str, field: str | None = None, copy: bool = False,
         **kwargs) -> argparse.Action:
    """One run option, declared once: its flag, help and validation (argparse's), its resume
    policy and the ``RunConfig`` field it fills (``field``, which resume compares or sets).
    ``copy``: the field is the parsed value as it is (``make_config`` derives the others)."""
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
    from compare.measure.numerics import DTYPE_NAMES

    dtypes = _csv(value)
    for d in dtypes:
        if d not in DTYPE_NAMES:
            raise argparse.ArgumentTypeError(f"unknown dtype {d!r} (known: {', '.join(DTYPE_NAMES)})")
    if len(set(dtypes)) != len(dtypes):
        raise argparse.ArgumentTypeError(f"{value!r} lists a dtype twice")
    return dtypes


def _cpu_list(value: str) -> list[int]:
    """``0,1`` or ``0-3`` or ``0-1,4``, as taskset and pyperf's --affinity take them."""
    from compare.measure.cpus import parse_cpu_list

    try:
        return parse_cpu_list(",".join(_csv(value)))  # _csv: an empty list is a usage error
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The run's options in sections, as ``--help`` prints them."""
    group = parser.add_argument_group
    _add_selection(group("selection", "what runs: backends, workloads, sizes, precisions, device"))
    _add_execution(group("execution", "how cells run: threads, limits, caches"))
    _add_timing(group("sampling", "how latency and numerics are sampled, and in which scenario"))
    _add_conditions(group("conditions", "run conditions recorded with the results"))
    _add_outputs(group("outputs", "where results go, and resuming"))
    _add_backend_options(group("backend options", "each backend's own settings (adapters' options)"))


def _add_selection(parser: Arguments) -> None:
    """What runs: backends, workloads, sizes, batches, precisions, device."""
    from workloads import SIZES, SUITES

    run, paper = (COMMAND_DEFAULTS[c]["backends"] for c in ("run", "paper"))
    _arg(parser, "--backends", resume=CHECKED, field="backends", type=_csv, default=None,
         help=f"comma-separated backends to compare with eager (default: {','.join(run)}; paper: {','.join(paper)})")
    _arg(parser, "--workloads", resume=CHECKED, field="workloads", type=_csv, default=None,
         help="comma-separated workloads from any suite (default: the --suite's)")
    _arg(parser, "--suite", resume=CHECKED, field="suite", choices=SUITES, default=None,
         help="built-in workloads to run: paper (the survey's five graphs), models "
              "(ResNet, MobileNetV2, BERT, GPT-2, ViT), llm (greedy decoding with a static KV "
              "cache: TTFT, TPOT, tokens/s), zoo (17 real architectures at published sizes: the "
              "coverage matrix) or all (the hand-written three; default: paper, or none when --model is given)")
    _arg(parser, "--batch", resume=CHECKED, field="batches", type=_batch_list, default=[], metavar="N[,N...]",
         help="batch sizes to sweep, each its own cell (default: each workload's own)")
    _arg(parser, "--dtype", resume=CHECKED, field="dtypes", type=_dtype_list, default=["fp32"], metavar="DTYPE[,...]",
         help="precision, comma-separated to sweep (default fp32): fp32, bf16, fp16, tf32 (CUDA: "
              "TF32 tensor-core math on fp32 tensors), int8 (static, each backend's quantizer), "
              "int8wo/int4wo (weight-only, --suite llm)")
    _arg(parser, "--workload-file", resume=CHECKED, field="workload_files", action="append", default=[], metavar="PATH",
         help="Python file defining extra workloads (run as code); repeatable")
    _arg(parser, "--model", resume=CHECKED, field="workload_files", action="append", default=[], metavar="SPEC",
         help="a model as you have it: hf:ZOO_NAME|CONFIG.json|DIR, timm:NAME, torchvision:NAME or "
              "pt2:PATH, seeded random weights unless DIR holds safetensors; never downloads; repeatable")
    _arg(parser, "--size", resume=CHECKED, field="size", choices=SIZES, default=None,
         help="workload shapes (default: 'default' on the CPU, 'large' on CUDA, where the default "
              "shapes are launch-bound)")
    _arg(parser, "--prompt-len", resume=CHECKED, field="prompt_len", copy=True, type=_positive_int, default=None, metavar="N",
         help="decode workloads (--suite llm): prompt tokens, the prefill (pp) figure's length "
              "(default 128 at the default size; 512 for llama-bench's pp512)")
    _arg(parser, "--gen-len", resume=CHECKED, field="gen_len", copy=True, type=_positive_int, default=None, metavar="N",
         help="decode workloads: tokens generated, the decode (tg) figure's length (default 128)")
    _arg(parser, "--device", resume=CHECKED, field="device", copy=True, choices=("cpu", "cuda"), default="cpu")


def _add_execution(parser: Arguments) -> None:
    """How cells run: threads, limits, where results, caches and logs go."""
    from compare.harness.runner import RunConfig

    _arg(parser, "--threads", resume=CHECKED, field="threads",
         type=_positive_int, default=None,
         help="threads for every backend (default: all cores, or the --affinity CPUs)"
    )
    _arg(parser, "--affinity", resume=CHECKED, field="affinity", type=_cpu_list, default=None, metavar="CPUS",
         help="pin every worker to these CPUs (0,1 or 0-3), as pyperf's --affinity and numactl do")
    _arg(parser, "--timeout", resume=OVERRIDABLE, field="timeout_s", copy=True, type=_positive_float, default=None,
         help=f"seconds per cell before it is killed (default {RunConfig.timeout_s:g}, 600 with --suite zoo)")
    _arg(parser, "--memory-limit", resume=OVERRIDABLE, field="memory_limit_mb", copy=True, type=_positive_int, default=None, metavar="MB",
         help="address-space limit per worker (cells over it are out_of_memory)")
    _arg(parser, "--output-dir", resume=REFUSED, default=None, help="where results go (default: reports/<timestamp>/)")
    _arg(parser, "--cache", resume=CHECKED, field="cache", copy=True, choices=("cold", "warm"), default="cold",
         help="cold: compile from nothing; warm: reuse persistent compile artifacts")
    _arg(parser, "--tuning-logs", resume=CHECKED, field="cache_root", default="tuning_logs", metavar="DIR",
         help="persistent tuning logs and caches")


def _add_timing(parser: Arguments) -> None:
    """How latency and numerics are sampled."""
    from compare.harness.runner import RunConfig
    from compare.measure.timing import TimingConfig
    from compare.scenarios import DEFAULT, scenario_names, scenarios

    _arg(parser, "--time-budget", resume=OVERRIDABLE, field="timing", type=_positive_float, default=TimingConfig.budget_s, metavar="S",
         help="soft budget in seconds for sampling one cell's latency")
    _arg(parser, "--min-samples", resume=OVERRIDABLE, field="timing", type=_positive_int, default=None, metavar="N",
         help=f"samples per cell before the stopping rule may stop it (default {TimingConfig.min_samples}, "
              "1 with --suite zoo: a call slower than the time budget is timed in one round)")
    _arg(parser, "--scenario", resume=CHECKED, field="scenario", copy=True, choices=scenario_names(), default=DEFAULT,
         help="; ".join(f"{s.name}: {s.help}" for s in scenarios().values()))
    for each in scenarios().values():
        each.add_options(_ScenarioOptions(parser))
    _arg(parser, "--sample-warmup", resume=OVERRIDABLE, field="timing", choices=("on", "off"), default="on",
         help="one untimed call before each timed sample, so that no sample pays for what the "
              "other callable left behind (default on; off: the method before 2026-11)")
    _arg(parser, "--interleave", resume=OVERRIDABLE, field="interleave", choices=("on", "off"), default=None,
         help="time the cells of a workload in turns, so that they and the eager-only reference "
              "sample the same stretch of time (default on, off with --suite zoo; local executor)")
    _arg(parser, "--processes", resume=CHECKED, field="processes", copy=True, type=_positive_int, default=None, metavar="K",
         help=f"fresh worker processes per cell, samples pooled across them; in a cold run the first "
              f"compiles and the others load its artifact (default {RunConfig.processes}, 1 with --suite zoo)")
    _arg(parser, "--noise-probe", resume=OVERRIDABLE, field="noise_probe_s", copy=True, type=float, default=3.0, metavar="S",
         help="seconds of the machine probe (compute loop, memory copy) before and after the cells, "
              "shown in the header (default 3; 0: none)")
    _arg(parser, "--reference-processes", resume=CHECKED, field="reference_processes", copy=True,
         type=_positive_int, default=None, metavar="K",
         help="at least K processes for the eager-only reference, pooled, so that one process's "
              f"offset does not shift every comparison with it (default {RunConfig.reference_processes}, "
              "1 with --suite zoo)")
    run, paper = (COMMAND_DEFAULTS[c]["numerics_draws"] for c in ("run", "paper"))
    _arg(parser, "--numerics-draws", resume=CHECKED, field="numerics_draws", copy=True, type=_positive_int, default=None,
         metavar="K", help=f"fresh input draws for the numerics check, worst case kept (default {run}; paper {paper})")
    _arg(parser, "--calibration-batches", resume=CHECKED, field="calibration_batches", copy=True, type=_positive_int,
         default=RunConfig.calibration_batches, metavar="N",
                        help="--dtype int8: seeded batches of the workload's inputs that every backend's quantizer "
                             f"calibrates on, apart from the evaluation draws (default {RunConfig.calibration_batches})")


class _ScenarioOptions:
    """How a scenario declares its run options (``compare.scenarios.base.RunOptions``)."""

    positive_int = staticmethod(_positive_int)
    positive_float = staticmethod(_positive_float)

    def __init__(self, parser: Arguments):
        self.parser = parser

    def add(self, flag: str, *, field: str, **kwargs) -> argparse.Action:
        return _arg(self.parser, flag, resume=CHECKED, field=field, **kwargs)


def _add_conditions(parser: Arguments) -> None:
    """Run conditions recorded with the results: seed, allocator, thread spin, executor."""
    from compare.harness.allocators import ALLOCATORS, DEFAULT_ALLOCATOR

    _arg(parser, "--seed", resume=CHECKED, field="seed", copy=True, type=int, default=0)
    _arg(parser, "--allocator", resume=CHECKED, field="allocator", choices=ALLOCATORS, default=DEFAULT_ALLOCATOR,
         help="malloc of every worker: system (glibc defaults), glibc-tuned (heap-only, no trim), "
              "jemalloc, tcmalloc or mimalloc (preloaded), auto: mimalloc, which the install brings "
              f"(default {DEFAULT_ALLOCATOR})")
    _arg(parser, "--system-malloc", resume=REFUSED, action=_Removed, replacement="--allocator system")
    _arg(parser, "--thread-spin", resume=CHECKED, field="thread_spin", copy=True, choices=("short", "default"), default="short",
         help="idle OpenMP and TVM pool threads spin about 0.3 ms (short) or as long as each "
              "runtime's default before sleeping (default: short)")
    _arg(parser, "--executor", resume=CHECKED, field="executor", copy=True, choices=("local", "ray"), default="local",
         help="local: cells one after another here; ray: one Ray task per cell")
    _arg(parser, "--ray-address", resume=OVERRIDABLE, field="ray_address", copy=True, default=None, metavar="ADDR",
         help="Ray cluster to join (default: start a local Ray instance)")
    _arg(parser, "--ray-share-cores", resume=CHECKED, field="ray_share_cores", copy=True, action="store_true",
         help="let timed cells share a node's cores (default: each task reserves --threads CPUs)")


def _add_outputs(parser: Arguments) -> None:
    _arg(parser, "--history", resume=NEUTRAL, default=None, metavar="DB",
         help="SQLite run history (default: history.sqlite beside the output folder)")
    _arg(parser, "--no-history", resume=NEUTRAL, action="store_true", help="do not record this run in the history")
    _arg(parser, "--keep-work-dirs", resume=OVERRIDABLE, field="keep_work_dirs", copy=True, action="store_true",
         help="keep each worker's scratch folder")
    _arg(parser, "--quiet", resume=NEUTRAL, action="store_true", help="no progress display")
    _arg(parser, "--list", resume=REFUSED, action=_Removed, replacement="python -m compare list [--device cuda]")
    _arg(parser, "--resume", resume=NEUTRAL, default=None, metavar="RUN_DIR",
         help="finish an interrupted run: only missing cells and transient failures run again")


_OPTION_TYPES = {"positive_int": _positive_int, "positive_float": _positive_float}


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
    _add_run_arguments(run)
    extra = run.add_argument_group("instruments", "what each cell measures besides its latency")
    _arg(extra, "--roofline", resume=CHECKED, field="roofline", action="store_true",
         help="measure this machine's ceilings and place every cell")
    _arg(extra, "--explain", resume=CHECKED, field="explain", copy=True, action="store_true",
         help="after timing, profile each cell with its backend's own profiler (see: compare explain)")
    _arg(extra, "--crosscheck", resume=CHECKED, field="crosscheck", copy=True, action="store_true",
         help="after timing, re-time each cell's artifact with its backend's own benchmark tool "
              "(iree-benchmark-module, benchmark_app, TVM's time_evaluator, torch.utils.benchmark)")
    _declare_copies(run)

    paper = sub.add_parser("paper", help="the survey's section-7 experiments, with its figures beside this run's")
    _add_run_arguments(paper)
    protocol = paper.add_argument_group("the survey's protocol", "its dynamic-shape part and the fusion profiles")
    _arg(protocol, "--dynamic-sizes", resume=REFUSED, type=_positive_int, default=4, metavar="K",
         help="distinct sizes of the varying dimension (default 4)")
    _arg(protocol, "--dynamic-calls", resume=REFUSED, type=_positive_int, default=40, metavar="N",
         help="calls in the shape sequence (default 40)")
    _arg(protocol, "--skip-dynamic", resume=REFUSED, action="store_true", help="leave out the dynamic-shape experiment")
    _arg(protocol, "--explain", resume=CHECKED, field="explain", copy=True, action="store_true",
         help="profile every cell after timing: the fusion part (kernels per call) needs it")
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
    bis.add_argument("--factor", type=_positive_float, default=10.0,
                     help="an op is bad when its error vs float64 exceeds this many times eager's (default 10)")
    bis.add_argument("--timeout", type=_positive_float, default=3600.0, help="seconds for the whole bisect")

    his = sub.add_parser("history", help="runs recorded in the history database, or one figure over time")
    his.add_argument("--db", default=str(Path("reports") / "history.sqlite"))
    his.add_argument("--workload")
    his.add_argument("--backend")

    for command in backend_subcommands().values():
        command.add_parser(sub)

    stab = sub.add_parser("stability", help="how well two runs of the same plan agree: does each speedup lie "
                          "inside the other run's 95%% interval")
    stab.add_argument("base")
    stab.add_argument("new")
    stab.add_argument("--output", default=None, metavar="PATH", help="also write the table as markdown here")

    sub.add_parser("system", help="what on this machine raises timing noise, as pyperf system show reports it")

    noi = sub.add_parser("noise", help="benchmark: how much this machine's speed changes from second to second")
    noi.add_argument("--seconds", type=_positive_float, default=20.0)

    ovh = sub.add_parser("overhead", help="benchmark: the harness's timing vs a bare perf_counter loop")
    ovh.add_argument("--repeats", type=_positive_int, default=15)
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
