"""``--resume``: which stored cells a resumed run keeps, and when it must refuse.

A run is resumed only on the same machine and packages, with every option that changes
what a cell measures as it was; options that do not (a timeout, the sampling budget)
may change. Cells that ended for good are kept; transient ones run again."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compare.results.schema import RunResults

# The resume policy of each run option is declared with its flag (``compare.cli._arg``) and
# reaches ``plan_resume`` as ``policy``: flag -> (rule, RunConfig field).
# CHECKED must match the stored run (it changes what a cell measures), OVERRIDABLE may change
# (a timeout, the sampling budget), NEUTRAL says how to run this command; REFUSED cannot be
# given with --resume.
CHECKED, OVERRIDABLE, NEUTRAL, REFUSED = "checked", "overridable", "neutral", "refused"


class ResumeRefused(ValueError):
    """The run cannot be resumed as asked; the message says why in one line."""


@dataclass
class ResumePlan:
    results: RunResults  # the stored run, transient cells removed, state "running"
    config: Any  # its RunConfig, with the overridable options the user gave
    rerun: int  # transient cells that will run again


def plan_resume(stored: RunResults, config, requested, explicit: set[str], now: dict[str, Any],
                policy: dict[str, tuple[str, str | None]]) -> ResumePlan:
    """``config``: the stored run's; ``requested``: what the command line asks, of which
    ``explicit`` flags were given; ``now``: this machine's environment; ``policy``: each
    run option's resume rule and field, as its flag declares them."""
    ruled: dict[str, dict[str, str]] = {rule: {flag: attr or "" for flag, (r, attr) in policy.items() if r == rule}
                                        for rule in (CHECKED, OVERRIDABLE, NEUTRAL)}
    for flag, attr in ruled[CHECKED].items():
        if flag in explicit and getattr(requested, attr) != getattr(config, attr):
            raise ResumeRefused(f"{flag} was {getattr(config, attr)} in that run, now {getattr(requested, attr)}; "
                                "start a new run instead")
    options = backend_option_flags()
    for flag, (name, default) in options.items():
        then, asked = config.options.get(name, default), requested.options.get(name, default)
        if flag in explicit and asked != then:
            raise ResumeRefused(f"{flag} was {_shown(then)} in that run, now {_shown(asked)}; start a new run instead")
    unknown = sorted(explicit - set(ruled[CHECKED]) - set(ruled[OVERRIDABLE]) - set(ruled[NEUTRAL]) - set(options)
                     - {"--help"})
    if unknown:
        raise ResumeRefused(f"{unknown[0]} cannot be given with --resume (it is not checked against the "
                            "stored run); start a new run instead")
    for flag, attr in ruled[OVERRIDABLE].items():
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
