"""The run's configuration, each option declared once: a ``RunConfig`` field carries its
flag, ``--help`` section, help, validation (argparse's ``type`` and ``choices``) and resume
policy (``run_option``), as a backend's options carry theirs (``adapters.base.option``).
The command line's parser, ``make_config``'s copying, the resume check and the cell's
spec (``compare.harness.cells``: a ``CellSpec`` field of the same name) are made from these
declarations (``flagged_fields``); the few flags that fill no field of their own (the
sampling budget, ``--model``, the history) are declared in ``compare.cli``.

``paper`` is ``run`` with other defaults (``COMMAND_DEFAULTS``); ``--suite zoo`` changes a
few where the command line says nothing (``SUITE_DEFAULTS``)."""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import MISSING, dataclass, field
from typing import Any, Callable

from compare.harness.allocators import ALLOCATORS, DEFAULT_ALLOCATOR, GLIBC_TUNED_ENV
from compare.harness.resume import CHECKED, NEUTRAL, OVERRIDABLE, REFUSED
from compare.results.roles import REFERENCE_BACKEND

__all__ = ["CHECKED", "COMMAND_DEFAULTS", "GROUPS", "NEUTRAL", "OVERRIDABLE", "REFUSED", "RunConfig",
           "SUITE_DEFAULTS", "flagged_fields", "parse_keywords", "run_option"]

# --help's sections, in order: name -> what the section holds
GROUPS = {
    "selection": "what runs: backends, workloads, sizes, precisions, device",
    "execution": "how cells run: threads, limits, caches",
    "sampling": "how latency and numerics are sampled, and in which scenario",
    "conditions": "run conditions recorded with the results",
    "outputs": "where results go, and resuming",
    "instruments": "what each cell measures besides its latency",
}

# What --suite zoo changes where the command line says nothing. The zoo is timed as the
# survey graphs are: 3 processes per cell in 3 passes over the run, each workload's cells
# interleaved with eager-only processes, and every cell's in-cell eager checked against
# the eager-only processes of its own stretches of time (compare.results.derived.fill_speedup).
# One process per cell, not interleaved, compared cells timed minutes apart: the in-cell
# eager sat up to +24 % from the eager-only cell, and 46 % of speedups fell inside the
# other run's interval (issue 56). At published sizes a worker holds the model, eager's
# copy and a float64 twin (Qwen2.5-0.5B: ~8 GB), so a group whose workers memory cannot
# hold at once runs in several stretches (compare.harness.executor.memory_room).
# Untuned TVM ran bert_base at 17 s a call (85x eager): one round for a call slower than
# the time budget (fast calls still sample to the budget or a precise median), and 10
# minutes per cell at most.
# The defaults of the options each command leaves unset: ``paper`` is ``run`` with these.
COMMAND_DEFAULTS: dict[str, dict] = {
    "run": {"backends": ["inductor", "ort", "tvm", "iree"], "numerics_draws": 1},
    "paper": {"backends": ["inductor", "ort", "tvm-untuned", "tvm", "iree"], "numerics_draws": 5},
}
# The zoo asks what lowers where: every CPU compiler, untuned TVM (tuning 17 models is hours).
ZOO_BACKENDS = ["inductor", "aot-inductor", "ort", "openvino", "tvm-untuned", "iree", "xla", "executorch"]
# The census (workloads/zoo/census.py) runs coverage-only (compare.config.make_config), tiny models.
SUITE_DEFAULTS: dict[str, dict] = {"zoo": {"backends": ZOO_BACKENDS, "min_samples": 1, "timeout": 600.0},
                                   "census": {"backends": ZOO_BACKENDS, "timeout": 300.0}}

TIMEOUT_S, PROCESSES, REFERENCE_PROCESSES, CALIBRATION_BATCHES = 1800.0, 3, 3, 8
_UNSET = object()  # the parser's default is the field's


# Validation: argparse ``type`` functions, each a one-line error for a bad value.

def csv(value: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return items


def _positive(value: str, parse: Callable[[str], Any], what: str, must: str) -> Any:
    try:
        number = parse(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not {what}") from None
    if not (number > 0) or number == float("inf"):
        raise argparse.ArgumentTypeError(f"{value!r} must be {must}")
    return number


def positive_int(value: str) -> int:
    return _positive(value, int, "an integer", "positive")


def positive_float(value: str) -> float:
    return _positive(value, float, "a number", "a positive finite number")


def batch_list(value: str) -> list[int]:
    batches = [positive_int(v) for v in csv(value)]
    if len(set(batches)) != len(batches):
        raise argparse.ArgumentTypeError(f"{value!r} lists a batch size twice")
    return batches


def dtype_list(value: str) -> list[str]:
    from compare.measure.numerics import DTYPE_NAMES

    dtypes = csv(value)
    for d in dtypes:
        if d not in DTYPE_NAMES:
            raise argparse.ArgumentTypeError(f"unknown dtype {d!r} (known: {', '.join(DTYPE_NAMES)})")
    if len(set(dtypes)) != len(dtypes):
        raise argparse.ArgumentTypeError(f"{value!r} lists a dtype twice")
    return dtypes


def cpu_list(value: str) -> list[int]:
    """``0,1`` or ``0-3`` or ``0-1,4``, as taskset and pyperf's --affinity take them."""
    from compare.measure.cpus import parse_cpu_list

    try:
        return parse_cpu_list(",".join(csv(value)))  # csv: an empty list is a usage error
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run_option(default: Any = MISSING, *, flag: str, group: str, resume: str, help: str | Callable[[], str] = "",
               derived: bool = False, cli_default: Any = _UNSET, default_factory: Any = MISSING,
               commands: tuple[str, ...] = ("run", "paper"), **parse: Any) -> Any:
    """A RunConfig field with its command-line flag. ``parse``: argparse's keywords
    (``type``, ``choices``, ``action``, ``metavar``); ``help`` and ``choices`` may be callables,
    called when the parser is built (what they read is imported then). ``derived``:
    ``make_config`` makes the field from the parsed value (else it is copied as it is);
    ``cli_default``: the parser's default when it is not the field's (None: a suite or
    command fills it, ``compare.config.suite_defaults``); ``commands``: which offer it."""
    if group not in GROUPS:
        raise ValueError(f"{flag}: unknown group {group!r}")
    metadata = {"flag": flag, "group": group, "resume": resume, "help": help, "derived": derived,
                "cli_default": cli_default, "commands": commands, "parse": parse}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def _backends_help() -> str:
    run, paper = (COMMAND_DEFAULTS[c]["backends"] for c in ("run", "paper"))
    return (f"comma-separated backends to compare with eager (default: {','.join(run)}; paper: {','.join(paper)}; "
            f"--suite zoo: the eight CPU compilers, {','.join(ZOO_BACKENDS)})")


def _suites() -> Any:
    from workloads import SUITES

    return SUITES


def _sizes() -> Any:
    from workloads import SIZES

    return SIZES


def _scenario_names() -> list[str]:
    from compare.scenarios import scenario_names

    return scenario_names()


def _scenario_help() -> str:
    from compare.scenarios import scenarios

    return "; ".join(f"{s.name}: {s.help}" for s in scenarios().values())


def _draws_help() -> str:
    run, paper = (COMMAND_DEFAULTS[c]["numerics_draws"] for c in ("run", "paper"))
    return f"fresh input draws for the numerics check, worst case kept (default {run}; paper {paper})"


@dataclass
class RunConfig:
    backends: list[str] = run_option(
        flag="--backends", group="selection", resume=CHECKED, derived=True, cli_default=None, type=csv,
        help=_backends_help)  # the reference first
    workloads: list[str] = run_option(
        flag="--workloads", group="selection", resume=CHECKED, derived=True, cli_default=None, type=csv,
        help="comma-separated workloads from any suite (default: the --suite's)")
    reference: str = REFERENCE_BACKEND  # the backend every other is compared with (compare.results.roles)
    suite: str = run_option(
        "paper", flag="--suite", group="selection", resume=CHECKED, derived=True, cli_default=None, choices=_suites,
        help="built-in workloads to run: paper (the survey's five graphs), models (ResNet, MobileNetV2, BERT, GPT-2, "
             "ViT), llm (greedy decoding with a static KV cache: TTFT, TPOT, tokens/s), zoo (17 real architectures "
             "at published sizes: the coverage matrix) or all (the hand-written three; default: paper, or none "
             "when --model is given)")  # which built-ins ran (recorded; the workloads list is what counts)
    batches: list[int] = run_option(
        flag="--batch", group="selection", resume=CHECKED, derived=True, default_factory=list, type=batch_list,
        metavar="N[,N...]", help="batch sizes to sweep, each its own cell (default: each workload's own)")
    dtypes: list[str] = run_option(
        flag="--dtype", group="selection", resume=CHECKED, derived=True, default_factory=lambda: ["fp32"],
        type=dtype_list, metavar="DTYPE[,...]",
        help="precision, comma-separated to sweep (default fp32): fp32, bf16, fp16, tf32 (CUDA: TF32 tensor-core "
             "math on fp32 tensors), int8 (static, each backend's quantizer), int8wo/int4wo (weight-only, "
             "--suite llm)")
    # user workload files and --model specs (compare.cli declares --model), resolved
    workload_files: list[str] = run_option(
        flag="--workload-file", group="selection", resume=CHECKED, derived=True, default_factory=list,
        action="append", metavar="PATH", help="Python file defining extra workloads (run as code); repeatable")
    size: str = run_option(
        "default", flag="--size", group="selection", resume=CHECKED, derived=True, cli_default=None, choices=_sizes,
        help="workload shapes (default: 'default' on the CPU, 'large' on CUDA, where the default shapes are "
             "launch-bound)")
    prompt_len: int | None = run_option(
        None, flag="--prompt-len", group="selection", resume=CHECKED, type=positive_int, metavar="N",
        help="decode workloads (--suite llm): prompt tokens, the prefill (pp) figure's length (default 128 at the "
             "default size; 512 for llama-bench's pp512)")  # None: the workloads' own
    gen_len: int | None = run_option(
        None, flag="--gen-len", group="selection", resume=CHECKED, type=positive_int, metavar="N",
        help="decode workloads: tokens generated, the decode (tg) figure's length (default 128)")
    device: str = run_option("cpu", flag="--device", group="selection", resume=CHECKED, choices=("cpu", "cuda"))

    threads: int = run_option(
        1, flag="--threads", group="execution", resume=CHECKED, derived=True, cli_default=None, type=positive_int,
        help="threads for every backend (default: all cores, or the --affinity CPUs)")
    affinity: list[int] | None = run_option(
        None, flag="--affinity", group="execution", resume=CHECKED, derived=True, type=cpu_list, metavar="CPUS",
        help="pin every worker to these CPUs (0,1 or 0-3), as pyperf's --affinity and numactl do")
    timeout_s: float = run_option(
        TIMEOUT_S, flag="--timeout", group="execution", resume=OVERRIDABLE, cli_default=None, type=positive_float,
        help=f"seconds per cell before it is killed (default {TIMEOUT_S:g}, 600 with --suite zoo)")
    memory_limit_mb: int | None = run_option(
        None, flag="--memory-limit", group="execution", resume=OVERRIDABLE, type=positive_int, metavar="MB",
        help="address-space limit per worker (cells over it are out_of_memory)")
    output_dir: str = run_option(
        "reports", flag="--output-dir", group="execution", resume=REFUSED, derived=True, cli_default=None,
        help="where results go (default: reports/<timestamp>/)")
    cache: str = run_option(
        "cold", flag="--cache", group="execution", resume=CHECKED, choices=("cold", "warm"),
        help="cold: compile from nothing; warm: reuse persistent compile artifacts")
    cache_root: str = run_option(
        "tuning_logs", flag="--tuning-logs", group="execution", resume=CHECKED, derived=True, metavar="DIR",
        help="persistent tuning logs and caches")

    # the sampler's settings (TimingConfig's fields: --time-budget, --min-samples, --sample-warmup)
    timing: dict[str, Any] = field(default_factory=dict)
    scenario: str = run_option(
        "back-to-back", flag="--scenario", group="sampling", resume=CHECKED, choices=_scenario_names,
        help=_scenario_help)  # how calls are issued: a scenario's name (compare.scenarios, one module each)
    # Lower each cell, call it once, check its numerics, and time nothing (issue 57): a
    # coverage census of hundreds of models on a small machine. One worker per cell, no
    # interleaving, no noise probe, no instruments (compare.config._coverage_only); the
    # cells keep their status, compile seconds and numerics verdict, their latency is None.
    coverage_only: bool = run_option(
        False, flag="--coverage-only", group="sampling", resume=CHECKED, commands=("run",), action="store_true",
        help="lower each cell, call it once and check its numerics; no timing (one worker per cell, no "
             "interleaving, no noise probe): what lowers where, for a census of many models on a small machine")
    # The scenario's own options (Scenario.option_values: --scenario server's ServerConfig
    # fields), plain JSON, copied to every cell's spec as they are.
    scenario_options: dict[str, Any] = field(default_factory=dict)
    # Time the cells of a workload in turns (compare.harness.interleave), so that every cell and
    # the eager-only reference sample the same stretch of time. Local executor only.
    interleave: bool = run_option(
        True, flag="--interleave", group="sampling", resume=OVERRIDABLE, derived=True, cli_default=None,
        choices=("on", "off"),
        help="time the cells of a workload in turns, so that they and the eager-only reference sample the same "
             "stretch of time, and compare each cell with the eager-only processes of its stretches (default on; "
             "local executor)")
    # Fresh worker processes per cell, their samples pooled (pyperf's repeats): one process's
    # state biases every sample it takes. In a cold run the first compiles and the others
    # load its artifact (compare.harness.pooling.ProcessPlan).
    processes: int = run_option(
        PROCESSES, flag="--processes", group="sampling", resume=CHECKED, cli_default=None, type=positive_int,
        metavar="K",
        help=f"fresh worker processes per cell, samples pooled across them; in a cold run the first compiles and "
             f"the others load its artifact (default {PROCESSES})")
    # More processes only for the cells that need them: after the K passes, a cell whose
    # speedup interval is still wider than +-5 % gets one more pass at a time (with eager-only
    # processes of its own), up to M processes (compare.harness.executor.LocalExecutor).
    max_processes: int | None = run_option(
        None, flag="--max-processes", group="sampling", resume=CHECKED, type=positive_int, metavar="M",
        help="after the --processes passes, one more pass at a time for the cells whose speedup interval is "
             "still wider than +-5%%, up to M processes each (interleaved runs; default: none)")
    # Seconds of the machine probe (a compute loop and a memory copy) before and after the
    # cells, shown in the header; 0: none.
    noise_probe_s: float = run_option(
        3.0, flag="--noise-probe", group="sampling", resume=OVERRIDABLE, type=float, metavar="S",
        help="seconds of the machine probe (compute loop, memory copy) before and after the cells, shown in the "
             "header (default 3; 0: none)")
    # at least this many for the eager-only reference: its own offset averages out
    reference_processes: int = run_option(
        REFERENCE_PROCESSES, flag="--reference-processes", group="sampling", resume=CHECKED, cli_default=None,
        type=positive_int, metavar="K",
        help=f"at least K processes for the eager-only reference, pooled, so that one process's offset does not "
             f"shift every comparison with it (default {REFERENCE_PROCESSES})")
    numerics_draws: int = run_option(
        1, flag="--numerics-draws", group="sampling", resume=CHECKED, cli_default=None, type=positive_int,
        metavar="K", help=_draws_help)  # fresh input draws for the numerics check (worst case kept)
    calibration_batches: int = run_option(
        CALIBRATION_BATCHES, flag="--calibration-batches", group="sampling", resume=CHECKED, type=positive_int,
        metavar="N",
        help=f"--dtype int8: seeded batches of the workload's inputs that every backend's quantizer calibrates "
             f"on, apart from the evaluation draws (default {CALIBRATION_BATCHES})")

    seed: int = run_option(0, flag="--seed", group="conditions", resume=CHECKED, type=int)
    # The malloc of every worker (compare.harness.allocators): a run condition shown with the
    # results. glibc-tuned serves large buffers from the heap and never trims it: with
    # glibc's defaults every call that allocates a multi-MB output gets fresh mmap pages and
    # a page-fault storm (eager LayerNorm measured 3-8x slower on a 2-core VM), which ORT's
    # own arena hides. Resolved (never "auto"): what the workers ran with.
    allocator: str = run_option(
        "glibc-tuned", flag="--allocator", group="conditions", resume=CHECKED, derived=True,
        cli_default=DEFAULT_ALLOCATOR, choices=ALLOCATORS,
        help="malloc of every worker: system (glibc defaults), glibc-tuned (heap-only, no trim), jemalloc, "
             f"tcmalloc or mimalloc (preloaded), auto: mimalloc, which the install brings (default {DEFAULT_ALLOCATOR})")
    malloc_env: dict[str, str] = field(default_factory=lambda: dict(GLIBC_TUNED_ENV))
    # Idle pool threads spin briefly ("short", environment.SHORT_SPIN_ENV) or as each
    # runtime's default ("default"): the same for every worker, recorded.
    thread_spin: str = run_option(
        "short", flag="--thread-spin", group="conditions", resume=CHECKED, choices=("short", "default"),
        help="idle OpenMP and TVM pool threads spin about 0.3 ms (short) or as long as each runtime's default "
             "before sleeping (default: short)")
    executor: str = run_option(
        "local", flag="--executor", group="conditions", resume=CHECKED, choices=("local", "ray"),
        help="local: cells one after another here; ray: one Ray task per cell")
    ray_address: str | None = run_option(
        None, flag="--ray-address", group="conditions", resume=OVERRIDABLE, metavar="ADDR",
        help="Ray cluster to join (default: start a local Ray instance)")
    ray_share_cores: bool = run_option(
        False, flag="--ray-share-cores", group="conditions", resume=CHECKED, action="store_true",
        help="let timed cells share a node's cores (default: each task reserves --threads CPUs)")

    keep_work_dirs: bool = run_option(
        False, flag="--keep-work-dirs", group="outputs", resume=OVERRIDABLE, action="store_true",
        help="keep each worker's scratch folder")

    # measure the machine's ceilings and place every cell under them (always in paper)
    roofline: bool = run_option(
        False, flag="--roofline", group="instruments", resume=CHECKED, derived=True, commands=("run",),
        action="store_true", help="measure this machine's ceilings and place every cell")
    # After timing, each worker profiles its model with the backend's own instrument
    # (--explain): kernels, their times and categories (compare explain).
    explain: bool = run_option(
        False, flag="--explain", group="instruments", resume=CHECKED, action="store_true",
        help="after timing, profile each cell with its backend's own profiler (see: compare explain; paper's "
             "fusion part, kernels per call, needs it)")
    # After timing, each worker re-times its artifact with the tool its backend's engineers
    # use (--crosscheck): iree-benchmark-module, benchmark_app, time_evaluator, ...
    crosscheck: bool = run_option(
        False, flag="--crosscheck", group="instruments", resume=CHECKED, commands=("run",), action="store_true",
        help="after timing, re-time each cell's artifact with its backend's own benchmark tool "
             "(iree-benchmark-module, benchmark_app, TVM's time_evaluator, torch.utils.benchmark)")

    options: dict[str, Any] = field(default_factory=dict)  # every backend's options (their own flags)
    preset: dict[str, Any] = field(default_factory=dict)  # what the suite set where the command line did not

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def flagged_fields(command: str = "run") -> list[dataclasses.Field]:
    """The RunConfig fields ``command`` offers as flags, in declaration order."""
    return [f for f in dataclasses.fields(RunConfig) if "flag" in f.metadata and command in f.metadata["commands"]]


def parse_keywords(f: dataclasses.Field) -> dict[str, Any]:
    """argparse's keywords for a flagged field: its help, validation and default (the
    parser's, which may differ from the field's: see ``run_option``)."""
    meta = f.metadata
    kwargs = {k: (v() if k == "choices" and callable(v) else v) for k, v in meta["parse"].items()}
    kwargs["help"] = meta["help"]() if callable(meta["help"]) else meta["help"]
    if meta["cli_default"] is not _UNSET:
        kwargs["default"] = meta["cli_default"]
    elif kwargs.get("action") != "store_true":
        kwargs["default"] = f.default_factory() if f.default_factory is not MISSING else f.default
    return {k: v for k, v in kwargs.items() if not (k == "help" and not v)}
