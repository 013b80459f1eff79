"""``--resume``: which stored cells a resumed run keeps, and when it must refuse.

A run is resumed only on the same machine and packages, with every option that changes
what a cell measures as it was; options that do not (a timeout, the sampling budget)
may change. Cells that ended for good are kept; transient ones run again."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compare.results.schema import RunResults

# flag -> RunConfig field: must match the stored run when given
CHECKED = {"--backends": "backends", "--workloads": "workloads", "--size": "size", "--device": "device",
           "--batch": "batches", "--dtype": "dtypes", "--suite": "suite", "--workload-file": "workload_files",
           "--model": "workload_files", "--prompt-len": "prompt_len", "--gen-len": "gen_len",
           "--threads": "threads", "--seed": "seed", "--cache": "cache", "--allocator": "allocator",
           "--processes": "processes", "--thread-spin": "thread_spin",
           "--reference-processes": "reference_processes", "--affinity": "affinity",
           "--numerics-draws": "numerics_draws", "--calibration-batches": "calibration_batches",
           "--roofline": "roofline", "--tuning-logs": "cache_root",
           "--executor": "executor", "--ray-share-cores": "ray_share_cores", "--scenario": "scenario",
           "--server-p99-ms": "server", "--server-run-ms": "server", "--server-runs": "server",
           # reporting only, but the kept cells were made without (or with) it: refused, never ignored
           "--explain": "explain", "--crosscheck": "crosscheck"}
# Options that do not change what a cell measures may differ on resume (e.g. a shorter timeout).
OVERRIDABLE = {"--timeout": "timeout_s", "--memory-limit": "memory_limit_mb", "--time-budget": "timing",
               "--min-samples": "timing", "--sample-warmup": "timing", "--keep-work-dirs": "keep_work_dirs",
               "--interleave": "interleave", "--noise-probe": "noise_probe_s", "--ray-address": "ray_address"}
# Flags that say how to run this command, not what a cell is: always fine.
NEUTRAL = {"--resume", "--quiet", "--history", "--no-history", "--help"}


class ResumeRefused(ValueError):
    """The run cannot be resumed as asked; the message says why in one line."""


@dataclass
class ResumePlan:
    results: RunResults  # the stored run, transient cells removed, state "running"
    config: Any  # its RunConfig, with the overridable options the user gave
    rerun: int  # transient cells that will run again


def plan_resume(stored: RunResults, config, requested, explicit: set[str], now: dict[str, Any]) -> ResumePlan:
    """``config``: the stored run's; ``requested``: what the command line asks, of which
    ``explicit`` flags were given; ``now``: this machine's environment."""
    for flag, attr in CHECKED.items():
        if flag in explicit and getattr(requested, attr) != getattr(config, attr):
            raise ResumeRefused(f"{flag} was {getattr(config, attr)} in that run, now {getattr(requested, attr)}; "
                                "start a new run instead")
    options = backend_option_flags()
    for flag, (name, default) in options.items():
        then, asked = config.options.get(name, default), requested.options.get(name, default)
        if flag in explicit and asked != then:
            raise ResumeRefused(f"{flag} was {_shown(then)} in that run, now {_shown(asked)}; start a new run instead")
    unknown = sorted(explicit - set(CHECKED) - set(OVERRIDABLE) - NEUTRAL - set(options))
    if unknown:
        raise ResumeRefused(f"{unknown[0]} cannot be given with --resume (it is not checked against the "
                            "stored run); start a new run instead")
    for flag, attr in OVERRIDABLE.items():
        if flag in explicit:
            setattr(config, attr, getattr(requested, attr))
    then = stored.environment
    for key in ("cpu_model", "cores"):
        if now.get(key) != then.get(key):
            raise ResumeRefused(f"{key} was {then.get(key)!r}, now {now.get(key)!r}")
    for name, version in (then.get("versions") or {}).items():
        if now["versions"].get(name) != version:
            raise ResumeRefused(f"{name} was {version}, now {now['versions'].get(name, 'not installed')}; "
                                "start a new run instead")
    kept = [c for c in stored.cells if not c.transient]
    rerun = len(stored.cells) - len(kept)
    stored.cells, stored.state = kept, "running"
    return ResumePlan(stored, config, rerun)


def backend_option_flags() -> dict[str, tuple[str, Any]]:
    """``--flag`` -> (config.options name, default) for every backend's CLI option."""
    from adapters import backend_classes

    return {f"--{f.metadata['flag']}": (f.name, f.default)
            for cls in backend_classes().values() for f in cls.options_type.cli_fields()}


def _shown(value: Any) -> str:
    return {True: "on", False: "off"}.get(value, str(value)) if isinstance(value, bool) else str(value)
