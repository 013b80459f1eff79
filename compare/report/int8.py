"""The int8 table: each backend's own quantizer, what it bought against int8 eager and fp32
eager, what it cost in quantization time and accuracy (read-only, from results)."""
from __future__ import annotations

import math
from typing import Any

import pandas as pd

from compare.measure.accuracy import INT8_TOLERANCE
from compare.measure.numerics import QUANTIZED_DTYPES
from compare.results.schema import Cell, RunResults

INT8_COLUMNS = ["workload", "backend", "status", "quantizer", "quantize s", "compile s", "latency ms",
                "vs int8 eager [95% CI]", "vs fp32 eager [95% CI]", "break-even vs fp32 (calls)", "cosine min",
                "rel err", "top-1 agree", "ops int8/fp32"]


def _ratio(value: float | None, interval: list[float] | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}x" + (f" [{interval[0]:.2f}-{interval[1]:.2f}]" if interval else "")


def _quantizer(cell: Cell) -> str:
    quantizer = (cell.conditions.settings or {}).get("quantizer")
    if isinstance(quantizer, dict):
        return str(quantizer.get("quantizer", "-")).split(" (")[0]
    return "-"


def _accuracy(cell: Cell) -> list[str]:
    acc = cell.int8.accuracy or {}
    if not acc or acc.get("error"):
        return [acc.get("error", "-"), "-", "-"]
    top1, error = acc.get("top1_agreement"), cell.numerics.numerics_error or ""

    def failed(metric: str) -> str:  # FAIL beside the metric the int8 verdict names
        return " FAIL" if cell.numerics.numerics_ok is False and metric in error else ""
    return [f"{acc['cosine_min']:.4f}{failed('cosine')}", f"{acc['rel_err']:.3f}{failed('relative error')}",
            "-" if top1 is None else f"{top1:.0%} of {acc['top1_rows']}{failed('top-1')}"]


def _ops(cell: Cell) -> str:
    ops = (cell.conditions.info or {}).get("int8_ops")
    return f"{ops['int8']}/{ops['fp32']}" if isinstance(ops, dict) else "-"


def _break_even(cell: Cell) -> str:
    if cell.status != "ok" or cell.int8.speedup_vs_fp32 is None:
        return "-"
    value = cell.int8.break_even_vs_fp32_calls
    return "never" if value is None or math.isinf(value) else f"{math.ceil(value):,}"


def int8_rows(results: RunResults) -> list[list[str]]:
    rows = []
    for cell in results.cells:
        if cell.dtype not in QUANTIZED_DTYPES:
            continue
        ok = cell.status == "ok"
        status = cell.status if ok else f"{cell.status}: {cell.error}"
        rows.append([cell.label, cell.backend, status, _quantizer(cell),
                     _seconds((cell.costs.compile_phases or {}).get("quantize")) if ok else "-",
                     _seconds(cell.compile_s) if ok else "-",
                     f"{cell.latency.median:.4g}" if cell.latency else "-",
                     "(reference)" if cell.is_reference and ok else _ratio(cell.speedup, cell.speedup_ci),
                     _ratio(cell.int8.speedup_vs_fp32, cell.int8.speedup_vs_fp32_ci), _break_even(cell),
                     *_accuracy(cell), _ops(cell)])
    return rows


def _seconds(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}"


def calibration_line(results: RunResults) -> str | None:
    """The calibration data every int8 cell used, and whether all backends of a workload
    used the same (one sha256 per workload)."""
    by_workload: dict[str, set[str]] = {}
    batches: set[int] = set()
    for cell in results.cells:
        record = (cell.conditions.settings or {}).get("calibration")
        if cell.dtype in QUANTIZED_DTYPES and isinstance(record, dict):
            by_workload.setdefault(cell.label, set()).add(record["sha256"])
            batches.add(record["batches"])
    if not by_workload:
        return None
    differ = sorted(label for label, hashes in by_workload.items() if len(hashes) > 1)
    same = (f"DIFFERENT data across backends for {', '.join(differ)}" if differ
            else "the same data, by sha256, for every backend of a workload")
    return (f"Calibration: {', '.join(map(str, sorted(batches)))} seeded batches of each workload's own inputs, apart "
            f"from the evaluation draws ({same}; settings.calibration).")


def int8_markdown(results: RunResults) -> list[str]:
    rows = int8_rows(results)
    if not rows:
        return []
    tol = INT8_TOLERANCE
    lines = ["", "## int8 (static post-training quantization, each backend's own quantizer)", "",
             pd.DataFrame(rows, columns=INT8_COLUMNS).to_markdown(index=False), "",
             "vs int8 eager: the PT2E-quantized model (X86InductorQuantizer) run in eager, timed alternately with "
             "the backend; vs fp32 eager: fp32 eager timed in the same rounds. Quantize s is a compile phase of its "
             "own, counted in compile s and in the break-even against fp32 eager. Accuracy against fp32 eager over "
             f"the cell's draws; numerics_ok for int8: cosine >= {tol['cosine_min']}, relative (L2) error <= "
             f"{tol['rel_err_max']}, top-1 agreement >= {tol['top1_agreement_min']:.0%} for the classifiers "
             "(docs/method.md#int8). Ops: int8/fp32 compute ops in the backend's own graph (info.int8_ops)."]
    calibration = calibration_line(results)
    if calibration:
        lines += ["", calibration]
    return lines
