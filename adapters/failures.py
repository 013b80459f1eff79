"""How a failed cell is classified for the coverage matrix, by the backend that raised it.

Each backend names the messages its own frontend gives for an op it cannot take
(``Backend.unsupported_op_patterns``); the worker records the verdict in the cell
(``info["verdict"]``) and the report reads it. Plain data in, a verdict out: nothing here
imports a compiler, so the parent can classify a result written before verdicts were.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Sequence

# The statuses a failure can take (the coverage matrix's others come from the cell's status).
FAILURE_STATUSES = ("fail_export", "fail_convert", "fail_compile")
# Messages any backend can pass on, whatever its own frontend (the op is group 1): torch.onnx
# (ORT's and ORT GenAI's exporter, and any backend fed an ONNX file), and generic wordings.
COMMON_PATTERNS = (
    re.compile(r"Unsupported FX nodes: \{'?([\w.:]+)"),  # torch.onnx
    re.compile(r"No ONNX function found for <OpOverload\(op='([\w.]+)'"),  # torch.onnx's dispatcher
    re.compile(r"[Nn]o (?:decomposition|lowering|translation|conversion|converter) (?:rule )?(?:found )?for "
               r"(?:op |operator |the op )?(?!operations?\b)'?([\w.:]+)"),  # not OpenVINO's list heading
    re.compile(r"(aten[.:]{1,2}[\w.]+)'? (?:is )?(?:not supported|unsupported)"),
)
EXPORT_MODULES = ("torch._dynamo", "torch.export", "torch._export", "torch.fx.experimental.symbolic_shapes")
# torch.onnx's exporter says which of its three steps failed: torch.export (step 1) and the
# decompositions run on its graph (step 2) are the export; step 3, the translation to ONNX
# ops, is a conversion.
ONNX_EXPORT_STEPS = re.compile(r"Failed to export the model with torch\.export|Failed to decompose the FX graph")
ANSI_CODE = re.compile(r"\x1b\[[0-9;]*m|\[[0-9;]+m(?=\S)")
CONVERT_PHASES = ("convert", "frontend", "lower")
PHASE_IN_ERROR = re.compile(r"in phase '(\w+)'")


@dataclasses.dataclass(frozen=True)
class FailureVerdict:
    """A failed cell's coverage status (``FAILURE_STATUSES``) and what it rests on: the op the
    frontend could not take, or the error's first line."""

    status: str
    detail: str


def unsupported_op(error: str, patterns: Sequence[re.Pattern[str]] = COMMON_PATTERNS) -> str | None:
    """The op a frontend says it cannot take, by the first of ``patterns`` that matches."""
    for pattern in patterns:
        if match := pattern.search(error):
            return match.group(1).rstrip(".,")
    return None


def classify_failure(info: dict[str, Any], error: str, patterns: Sequence[re.Pattern[str]]) -> FailureVerdict:
    """Export, convert or compile, from the op the error names (``patterns``), the exception's
    module and the phase it failed in (``info``: what the worker recorded, ``failure_info``)."""
    if op := unsupported_op(f"{error}\n{info.get('error_text') or ''}", patterns):  # the whole message kept
        return FailureVerdict("fail_convert", op)
    phase = info.get("failed_phase") or ((m := PHASE_IN_ERROR.search(error)) and m.group(1)) or ""
    if str(info.get("exception", "")).startswith(EXPORT_MODULES) or ONNX_EXPORT_STEPS.search(error):
        return FailureVerdict("fail_export", first_line(info.get("first_error_line") or error))
    if phase in CONVERT_PHASES:
        return FailureVerdict("fail_convert", first_line(error))
    return FailureVerdict("fail_compile", first_line(info.get("first_error_line") or error))


def first_line(text: str | None, limit: int = 160) -> str:
    text = ANSI_CODE.sub("", text or "")  # torch.onnx colours its step numbers
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."
