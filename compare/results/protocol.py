"""What the parent and a worker say to each other, and how a cell ends.

The worker (``python -m compare.worker SPEC RESULT``) gets its spec as a JSON file,
reports events as ``@@dlcompare {json}`` lines on stdout, takes timing commands as JSON
lines on stdin when its cells are interleaved, and writes its result (the fields of
``compare.results.schema.Cell``) to RESULT. Both sides import this module and nothing else of
each other, so the parent never loads torch or a compiler to speak with a worker.

Events (worker -> parent): ``{"phase": name}``, ``{"imported": true}`` when its imports are
done and it waits to compile (``spec["await_compile"]``), ``{"ready": {"round_s": s}}`` once it
can time, ``{"slice": {"rounds": n, "done": bool, "round_s": s}}`` after each slice.
Commands (parent -> worker): ``{"compile": true}``, ``{"rounds": n}``, ``{"finish": true}``.
"""
from __future__ import annotations

import json
from typing import Any

EVENT_PREFIX = "@@dlcompare "

# How a cell ended. ``transient`` (a field of its own) says whether a rerun may end it
# differently because the machine, not the code, was at fault: --resume runs it again.
STATUSES = ("ok", "failed", "timeout", "out_of_memory", "unavailable")
TRANSIENT_STATUSES = ("timeout", "out_of_memory")
OOM_MARKERS = ("can't allocate memory", "Cannot allocate memory", "std::bad_alloc", "out of memory",
               "OutOfMemoryError", "MemoryError", "failed to allocate")


def encode_event(**event: Any) -> str:
    return EVENT_PREFIX + json.dumps(event) + "\n"


def decode_event(line: str) -> dict[str, Any] | None:
    """The event on one line of a worker's stdout; None for any other output."""
    if not line.startswith(EVENT_PREFIX):
        return None
    try:
        event = json.loads(line[len(EVENT_PREFIX):])
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) else None


def rounds_command(rounds: int) -> dict[str, Any]:
    return {"rounds": int(rounds)}


def compile_command() -> dict[str, Any]:
    return {"compile": True}


def finish_command() -> dict[str, Any]:
    return {"finish": True}


def encode_command(command: dict[str, Any]) -> str:
    return json.dumps(command) + "\n"


def looks_out_of_memory(text: str) -> bool:
    return any(marker in text for marker in OOM_MARKERS)


def ended(status: str, error: str, transient: bool | None = None) -> dict[str, Any]:
    """A cell that ended without a result, as cell fields. Timeouts and out-of-memory kills
    are transient unless said otherwise; so is a worker killed from outside or lost with
    its node (the caller says so)."""
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}")
    return {"status": status, "error": error,
            "transient": status in TRANSIENT_STATUSES if transient is None else transient}
