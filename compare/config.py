"""From the command line to a RunConfig: every option checked, in one line each when
bad, before anything runs; and the config of a run being resumed."""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import re
from pathlib import Path
from typing import Any

from compare.harness.run_config import COMMAND_DEFAULTS, SUITE_DEFAULTS


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


def backend_options(args: argparse.Namespace) -> dict:
    """The run's ``config.options``: every backend option by field name (switches as bools)."""
    from adapters import backend_classes

    options = {}
    for cls in backend_classes().values():
        for f in cls.options_type.cli_fields():
            value = getattr(args, f.name)
            options[f.name] = value == "on" if f.metadata["kind"] == "switch" else value
    return options


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
    from compare.harness.environment import available_cores
    from compare.harness.run_config import RunConfig

    preset = suite_defaults(args)
    size_unset = args.size is None
    backends = _checked_backends(args.backends)
    workloads = _checked_workloads(args)  # sets an unset --size from the device's
    if size_unset and args.size != "default":
        preset["size"] = args.size
    _check_options(args)
    if args.suite == "census" and not args.coverage_only:  # hundreds of models: what lowers, not how fast
        args.coverage_only = preset["coverage_only"] = True
    _coverage_only(args)
    args.scenario = _run_scenario(args, workloads)
    allocator, malloc_env = _allocator(args)
    affinity = _checked_affinity(args.affinity)
    copied = {field: getattr(args, dest) for dest, field in args.copied_fields}  # cli: _arg(copy=True)
    return RunConfig(
        **copied,
        backends=backends,
        workloads=[w.name for w in workloads],
        size=args.size,
        threads=args.threads or (len(affinity) if affinity else available_cores()),
        cache_root=str(Path(args.tuning_logs)),
        output_dir=str(_output_dir(args, output_dir)),
        workload_files=[str(Path(f).resolve()) for f in args.workload_file] + run_model_specs(args),
        timing=_timing(args),
        scenario_options=_scenario_options(args),
        options=backend_options(args),
        batches=list(args.batch),
        dtypes=list(args.dtype),
        suite=args.suite or ("none" if args.model else "paper"),
        roofline=getattr(args, "roofline", False) or args.command == "paper",
        allocator=allocator,
        malloc_env=malloc_env,
        interleave=args.interleave == "on" and args.executor == "local",
        preset=preset,
        affinity=affinity,
    )


# The size a device runs when --size is not given. On a GPU the default shapes are
# launch-bound (an H200's calls lasted 0.05-0.25 ms, so Inductor's wrapper overhead
# decided the verdict, not its kernels); the large size gives the GPU work to do.
DEVICE_SIZES = {"cpu": "default", "cuda": "large"}


def suite_defaults(args: argparse.Namespace) -> dict:
    """Fill the options the command line left unset (None) from the suite's defaults, else
    the run's (in place); returns what the suite set, recorded with the run."""
    from compare.harness.run_config import RunConfig
    from compare.measure.timing import TimingConfig

    run = {"processes": RunConfig.processes, "reference_processes": RunConfig.reference_processes,
           "interleave": "on" if RunConfig.interleave else "off", "min_samples": TimingConfig.min_samples,
           "timeout": RunConfig.timeout_s,
           **COMMAND_DEFAULTS["paper" if getattr(args, "command", None) == "paper" else "run"]}
    preset = SUITE_DEFAULTS.get(getattr(args, "suite", None) or "", {})
    applied = {}
    for name, default in run.items():
        if getattr(args, name, None) is None:
            if name in preset:
                applied[name] = preset[name]
            setattr(args, name, preset.get(name, default))
    return applied


def device_size(device: str, workloads: list) -> str:
    """The size a run on ``device`` takes when --size is not given: the device's, when every
    chosen workload has it (the zoo and the real decoders have no large size), else the default."""
    wanted = DEVICE_SIZES.get(device, "default")
    return wanted if all(wanted in w.sizes for w in workloads) else "default"


def _timing(args: argparse.Namespace) -> dict:
    """The TimingConfig fields the command line sets, as the run's scenario changes them."""
    from compare.scenarios import DEFAULT, scenario

    timing = {"budget_s": args.time_budget, "min_samples": args.min_samples,
              "sample_warmup": args.sample_warmup == "on"}
    return scenario(getattr(args, "scenario", DEFAULT)).timing(timing, args)


def _run_scenario(args: argparse.Namespace, workloads: list) -> str:
    """The run's scenario: the one asked for, or the one that claims every chosen workload
    (``Scenario.claims``: the decoders generate); a claimed workload's cells run its claimer
    in any run, and a scenario that claims workloads runs only those."""
    from compare.scenarios import DEFAULT, claiming, scenario

    asked = getattr(args, "scenario", None) or DEFAULT
    owner = {w.name: getattr(claiming(w.tags), "name", None) for w in workloads}
    if scenario(asked).claims_workloads:
        wrong = [name for name, claimer in owner.items() if claimer != asked]
        if wrong:
            raise UsageError(f"--scenario {asked} runs only the workloads it claims; {wrong[0]} is not one")
        return asked
    owners = set(owner.values())
    if len(owners) != 1 or None in owners:
        return asked
    (claimer,) = owners
    if "--scenario" in getattr(args, "explicit", set()) and asked != claimer:
        raise UsageError(f"--scenario {asked}: {', '.join(owner)} run only under --scenario {claimer}")
    return claimer


def _scenario_options(args: argparse.Namespace) -> dict[str, Any]:
    """The run's scenario's option values; an option of another scenario than the run's is a
    usage error, not a flag quietly ignored."""
    from compare.scenarios import DEFAULT, scenarios

    chosen = getattr(args, "scenario", DEFAULT)
    values: dict[str, Any] = {}
    for each in scenarios().values():
        try:
            values.update(each.option_values(args, chosen=each.name == chosen))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return values


def _checked_affinity(cpus: list[int] | None) -> list[int] | None:
    """--affinity: CPUs this process may run on, or a usage error naming those it may."""
    import os

    if not cpus:
        return None
    allowed = sorted(os.sched_getaffinity(0))
    outside = [c for c in cpus if c not in allowed]
    if outside:
        raise UsageError(f"--affinity: CPU(s) {', '.join(map(str, outside))} not available here "
                         f"(this process may use {', '.join(map(str, allowed))})")
    return cpus


def _checked_backends(names: list[str]) -> list[str]:
    """The reference first, then the others, each known and listed once."""
    from adapters import get_backend
    from compare.results.roles import reference_first

    backends = reference_first(names)
    for b in backends:
        try:
            get_backend(b)
        except (KeyError, ValueError) as exc:
            raise UsageError(exc.args[0]) from None
    if len(set(backends)) != len(backends):
        raise UsageError("a backend is listed twice in --backends")
    return backends


def _checked_workloads(args: argparse.Namespace) -> list:
    from compare.measure.numerics import WEIGHT_ONLY
    from workloads import resolve_workloads
    from workloads.llm import LLM_TAG, with_lengths

    names = list(dict.fromkeys(args.workloads)) if args.workloads else None  # each workload once
    # --model alone runs the models given; with --suite or --workloads, beside those.
    suite = args.suite or ("none" if args.model else "paper")
    workloads = resolve_workloads(names, [*args.workload_file, *run_model_specs(args)], suite)  # WorkloadError
    if args.size is None:
        args.size = device_size(args.device, workloads)
    lengths = (getattr(args, "prompt_len", None), getattr(args, "gen_len", None))
    generates = any(LLM_TAG in w.tags for w in workloads)
    if lengths != (None, None) and not generates:
        raise UsageError("--prompt-len/--gen-len: none of the chosen workloads generates tokens (--suite llm)")
    if set(args.dtype) & set(WEIGHT_ONLY) and not generates:
        raise UsageError("--dtype int8wo/int4wo: weight-only quantization is measured on the decode suite (--suite llm)")
    workloads = [with_lengths(w, *lengths) for w in workloads]  # a prompt the model cannot hold: WorkloadError
    for w in workloads:
        for batch in args.batch if w.batch_param else [None]:
            w.with_batch(batch).input_specs(args.size)  # a bad size is a usage error, not a failed cell
    if args.batch and not any(w.batch_param for w in workloads):
        raise UsageError("--batch: none of the chosen workloads has a batch dimension")
    return workloads


def model_specs(specs: list[str]) -> list[str]:
    """``--model`` specs with their paths made absolute (the workers run elsewhere), a
    ``NAME=`` kept."""
    from workloads.zoo.intake import split_name

    out = []
    for spec in specs:
        given, bare = split_name(spec)
        kind, _, rest = bare.partition(":")
        local = rest and kind in ("pt2", "onnx", "hf") and (Path(rest).expanduser().exists() or kind != "hf")
        named = f"{given}=" if given else ""
        out.append(f"{named}{kind}:{Path(rest).expanduser().resolve()}" if local else spec)
    return out


def run_model_specs(args: argparse.Namespace) -> list[str]:
    """The run's model specs: ``--model``'s, and with ``--suite census`` one a census model."""
    specs = model_specs(args.model)
    if args.suite == "census":
        from workloads.zoo.census import census_specs

        specs += [f"census:{spec}" for spec in census_specs()]
    return specs


def _check_options(args: argparse.Namespace) -> None:
    if args.noise_probe < 0 or args.noise_probe > 60:
        raise UsageError(f"--noise-probe {args.noise_probe:g}: give 0 to 60 seconds")
    if args.cuda_arch and not re.fullmatch(r"sm_\d{2,3}a?", args.cuda_arch):
        raise UsageError(f"--cuda-arch {args.cuda_arch!r} is not of the form sm_XY (e.g. sm_80)")
    if args.executor == "ray" and importlib.util.find_spec("ray") is None:
        raise UsageError("--executor ray needs Ray: pip install -e '.[ray]'")
    if getattr(args, "max_processes", None) is not None and not getattr(args, "coverage_only", False):
        if args.max_processes < args.processes:
            raise UsageError(f"--max-processes {args.max_processes} is below --processes {args.processes}")
        if args.interleave != "on" or args.executor != "local":
            raise UsageError("--max-processes adds passes of interleaved time: it needs --interleave on and the "
                             "local executor")
    if "tf32" in args.dtype and args.device != "cuda":
        raise UsageError("--dtype tf32 is a CUDA tensor-core math mode: add --device cuda (on the CPU, fp32 is fp32)")


# What --coverage-only sets, as the flags say it: one worker per cell, no interleaving, no noise probe.
COVERAGE_ONLY = {"processes": 1, "max_processes": None, "reference_processes": 1, "interleave": "off",
                 "noise_probe": 0.0}
# The flags that ask for something of the timing, or of an instrument that follows it.
COVERAGE_REFUSES = ("--explain", "--crosscheck", "--roofline", "--scenario")


def _coverage_only(args: argparse.Namespace) -> None:
    """--coverage-only: the options that serve timing set to none (in place); one that the
    command line asks for in another value is a usage error, not a flag quietly ignored."""
    if not getattr(args, "coverage_only", False):
        return
    explicit = getattr(args, "explicit", set())
    for flag in COVERAGE_REFUSES:
        value = getattr(args, flag[2:], None)
        if flag in explicit and value not in (None, False):  # --scenario named at all: it is timing's
            raise UsageError(f"--coverage-only times nothing: leave out {flag}")
    for name, value in COVERAGE_ONLY.items():
        flag = "--" + name.replace("_", "-")
        if flag in explicit and getattr(args, name) != value:
            raise UsageError(f"--coverage-only runs one worker per cell, untimed: leave out {flag} "
                             f"{getattr(args, name)}")
        setattr(args, name, value)


def _allocator(args: argparse.Namespace) -> tuple[str, dict[str, str]]:
    from compare.harness.allocators import AllocatorMissing, allocator_env, resolve

    allocator = resolve(args.allocator)
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
    (``compare.harness.resume``)."""
    from compare.harness import environment
    from compare.harness.resume import ResumeRefused, plan_resume
    from compare.harness.run_config import RunConfig
    from compare.results.schema import RunResults

    stored = RunResults.load(args.resume)
    try:
        config = RunConfig(**stored.config)
    except TypeError as exc:
        raise UsageError(f"{args.resume}: its config cannot be resumed by this dlcompare ({exc})") from None
    config.output_dir = str(Path(args.resume))
    requested = make_config(args, output_dir=Path(args.resume))
    try:
        plan = plan_resume(stored, config, requested, args.explicit, environment.capture(config.threads, config.device),
                           args.resume_policy)  # each option's, as its flag declares it (compare.cli._arg)
    except ResumeRefused as exc:
        raise UsageError(f"cannot resume {args.resume}: {exc}") from None
    return plan.results, plan.config, plan.rerun
