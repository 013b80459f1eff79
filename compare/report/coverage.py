"""The coverage matrix: for each model and backend, does it lower, does it agree, does it win.

Each cell gets one status, as PyTorch's dynamo harness classifies models for Inductor, here
across compilers:

- ``pass``: ran and agreed with eager;
- ``fail_export``: torch.export (or dynamo's capture) refused the model;
- ``fail_convert``: the backend's frontend has no rule for an op (named);
- ``fail_compile``: the compiler or runtime failed after conversion (its first error line);
- ``fail_accuracy``: ran, outside the tolerance;
- ``timeout``, ``oom``: the worker ran out of time or memory;
- ``eager_fail``: the model itself did not run in eager, so no backend is judged;
- ``unavailable``: the backend is not installed or has no path for this precision.

Reports read results; they never measure.
"""
from __future__ import annotations

import functools
import math
import re
from pathlib import Path
from typing import Any

from adapters.failures import FAILURE_STATUSES, first_line
from compare.report.backends import backend_class
from compare.results.roles import REFERENCE
from compare.results.schema import Cell, RunResults, atomic_write_text

STATUSES = ("pass", "fail_export", "fail_convert", "fail_compile", "fail_accuracy", "timeout", "oom",
            "eager_fail", "unavailable")
FAILED = ("fail_export", "fail_convert", "fail_compile", "fail_accuracy")  # the statuses a reproducer is written for


def classify(cell: Cell, reference: Cell | None) -> tuple[str, str]:
    """(status, detail): the cell's coverage status and the op, error line or figure behind it
    (``eager_fail``: the reference failed, so nothing could be compared with it)."""
    if not cell.is_reference and reference is not None and reference.status != "ok":
        return "eager_fail", first_line(reference.error)
    if cell.status == "ok":
        if cell.numerics.numerics_ok is False:
            return "fail_accuracy", cell.numerics.numerics_error or f"max abs err {cell.numerics.max_abs_err}"
        return "pass", ""
    if cell.status in ("timeout", "unavailable"):
        return cell.status, first_line(cell.error)
    if cell.status == "out_of_memory":
        return "oom", first_line(cell.error)
    if cell.is_reference:
        return "eager_fail", first_line(cell.error)
    return failure_status(cell)


def failure_status(cell: Cell) -> tuple[str, str]:
    """A failed cell: the verdict its backend gave in the worker (``Backend.classify_failure``),
    or, for a result recorded before verdicts were, the one its backend gives now."""
    info = cell.conditions.info if isinstance(cell.conditions.info, dict) else {}
    verdict = info.get("verdict")
    if isinstance(verdict, dict) and verdict.get("status") in FAILURE_STATUSES:
        return verdict["status"], verdict.get("detail", "")
    found = backend_class(cell.backend).classify_failure(info, cell.error or "")
    return found.status, found.detail


def applies(results: RunResults) -> bool:
    """The matrix heads the reports of a zoo run, of a run with --model specs and of a
    --coverage-only run (whose question it is)."""
    from workloads.zoo.intake import is_model_spec

    cfg = results.config
    return (cfg.get("suite") == "zoo" or bool(cfg.get("coverage_only"))
            or any(is_model_spec(f) for f in cfg.get("workload_files", [])))


def _variants(results: RunResults) -> dict[tuple, dict[str, Cell]]:
    """Cells by (workload, size, batch, dtype, device), then by backend."""
    rows: dict[tuple, dict[str, Cell]] = {}
    for cell in results.cells:
        rows.setdefault((cell.workload, cell.size, cell.batch, cell.dtype, cell.device), {})[cell.backend] = cell
    return rows


def matrix(results: RunResults) -> list[dict[str, Any]]:
    """One record per (model, backend): status, detail, speedup [interval], compile s, peak MB."""
    out = []
    for (workload, size, batch, dtype, device), cells in _variants(results).items():
        ref = next((c for c in cells.values() if c.is_reference), None)
        # an ONNX file's reference is onnxruntime, said in the eager cell (adapters/eager.py)
        reference = (ref.conditions.info or {}).get("reference") if ref is not None and isinstance(ref.conditions.info, dict) else None
        for backend, cell in cells.items():
            status, detail = classify(cell, ref)
            out.append({"model": workload, "label": cell.label, "size": size, "batch": cell.batch, "dtype": dtype,
                        "device": device, "latency_ms": cell.latency.median if cell.latency else None,
                        "backend": backend, "role": cell.role, "status": status, "detail": detail,
                        "speedup": cell.speedup if status == "pass" else None,
                        "speedup_ci": cell.speedup_ci if status == "pass" else None,
                        "compile_s": cell.compile_s, "peak_mb": cell.memory.peak_rss_mb,
                        "eager_ms": cell.eager_median_ms, "reference": reference})
    return out


def backend_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per backend: pass rate, and the speedup geomean over the models every backend passed."""
    backends = list(dict.fromkeys(r["backend"] for r in records if r["role"] != REFERENCE))
    labels = list(dict.fromkeys(r["label"] for r in records))
    passed_everywhere = [m for m in labels if all(r["status"] == "pass" for r in records if r["label"] == m)]
    rows = []
    for backend in backends:
        mine = [r for r in records if r["backend"] == backend]
        passed = [r for r in mine if r["status"] == "pass"]
        common = [r["speedup"] for r in passed if r["label"] in passed_everywhere and r["speedup"]]
        counts = {s: sum(r["status"] == s for r in mine) for s in STATUSES if s != "pass"}
        rows.append({"backend": backend, "pass rate": f"{len(passed)}/{len(mine)}",
                     "geomean speedup (models passing everywhere)":
                         f"{math.exp(sum(map(math.log, common)) / len(common)):.2f}x ({len(common)})" if common else "-",
                     "failures": ", ".join(f"{s} {n}" for s, n in counts.items() if n) or "-"})
    return rows


def cell_text(record: dict[str, Any]) -> str:
    if record["status"] == "pass":
        if record["role"] == REFERENCE:
            said = ([f"{record['eager_ms']:.3g} ms"] if record["eager_ms"] else []) + (  # untimed (--coverage-only): none
                [record["reference"]] if record.get("reference") else [])
            return f"pass ({'; '.join(said)})" if said else "pass"
        ci = record["speedup_ci"]
        return f"pass {record['speedup']:.2f}x" + (f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci else "") if record["speedup"] else "pass"
    return f"{record['status']}: {record['detail']}" if record["detail"] else record["status"]


def reproducer_paths(records: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """{(label, backend): the script's path in the run folder} for every failed cell whose
    backend has a reproducer: one script per model, so that a user files each model's own
    failure upstream (two models that fail on the same line may not fail for one reason)."""
    paths: dict[tuple[str, str], str] = {}
    for record in records:
        if record["status"] not in FAILED or record["role"] == REFERENCE or record.get("reference"):
            continue  # the snippets lower a torch module: an ONNX file's failure has the error line alone
        if record.get("model") in hand_written():
            continue  # a script rebuilds a zoo entry or a --model spec, not a module written in dlcompare
        try:
            snippet = getattr(backend_class(record["backend"]), "reproducer", None)
        except Exception:  # a backend no longer known here: no script
            snippet = None
        if snippet:
            paths[(record["label"], record["backend"])] = f"reproducers/{slug(record['label'])}__{slug(record['backend'])}.py"
    return paths


@functools.cache
def hand_written() -> frozenset[str]:
    """The built-in workloads written as modules in dlcompare (the paper and models suites, the
    toy decoder), which a --coverage-only run may cover: no reproducer rebuilds them."""
    from workloads import builtin_workloads

    return frozenset(builtin_workloads("all"))


def grid(records: list[dict[str, Any]]) -> tuple[list[str], list[tuple[str, list[tuple[str, str, str | None]]]]]:
    """(header, rows): models down, backends across (eager first); each cell (text, status,
    the reproducer's path or None)."""
    scripts = reproducer_paths(records)
    backends = list(dict.fromkeys(r["backend"] for r in records))
    rows = []
    for label in dict.fromkeys(r["label"] for r in records):
        mine = {r["backend"]: r for r in records if r["label"] == label}
        rows.append((label, [(cell_text(mine[b]), mine[b]["status"], scripts.get((label, b))) if b in mine
                             else ("-", "", None) for b in backends]))
    return ["model", *backends], rows


def markdown(results: RunResults) -> str:
    """The matrix as summary.md's first section."""
    records = matrix(results)
    if not records:
        return ""
    header, rows = grid(records)
    passed = ("`pass` (coverage only: compiled, called once, agreed with eager; not timed)"
              if results.config.get("coverage_only") else "`pass` with the speedup over eager [95 % CI]")
    lines = ["## Coverage: what lowers, what agrees, what wins", "",
             f"Each cell: {passed}, or the failure class and the op or first "
             "error line (" + ", ".join(f"`{s}`" for s in STATUSES) + ").", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for model, cells in rows:
        texts = [text + (f" ([reproducer]({link}))" if link else "") for text, _, link in cells]
        lines.append("| " + " | ".join(t.replace("|", "\\|") for t in [model, *texts]) + " |")
    per_backend = backend_rows(records)
    if per_backend:
        cols = list(per_backend[0])
        lines += ["", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in per_backend]
    return "\n".join(lines) + "\n"


# The dynamo benchmark harness's CSV columns (benchmarks/dynamo/common.py), so the dashboards
# that read its files read ours; the columns it fills from dynamo counters dlcompare cannot
# know for other compilers are left out.
ACCURACY_COLUMNS = ("dev", "name", "batch_size", "accuracy")
PERFORMANCE_COLUMNS = ("dev", "name", "batch_size", "speedup", "abs_latency", "compilation_latency",
                       "compression_ratio", "eager_peak_mem", "dynamo_peak_mem")
# Its accuracy values; an unavailable backend has no row (the harness has no such value).
HARNESS_ACCURACY = {"pass": "pass", "fail_accuracy": "fail_accuracy", "timeout": "timeout", "oom": "OOM",
                    "eager_fail": "eager_1st_run_fail", "fail_export": "fail_to_run", "fail_convert": "fail_to_run",
                    "fail_compile": "fail_to_run"}


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def performance_row(r: dict[str, Any], eager_peak_mb: float | None) -> dict[str, Any]:
    """The harness's performance row: a failed model has speedup and latency 0 (as its own);
    latency in ms, compile in s, peak resident memory in GB (10**9 bytes)."""
    ok = bool(r["speedup"])
    gb = lambda mb: (mb or 0.0) * 2**20 / 1e9  # noqa: E731
    compiled, eager = gb(r["peak_mb"]) if ok else 0.0, gb(eager_peak_mb) if ok else 0.0
    return {"dev": r["device"], "name": r["model"], "batch_size": (r["batch"] or 1) if ok else 0,
            "speedup": r["speedup"] or 0.0, "abs_latency": (r["latency_ms"] or 0.0) if ok else 0.0,
            "compilation_latency": (r["compile_s"] or 0.0) if ok else 0.0,
            "compression_ratio": eager / compiled if compiled else 0.0, "eager_peak_mem": eager, "dynamo_peak_mem": compiled}


def write_harness_csvs(results: RunResults, run_dir: str | Path) -> list[Path]:
    """``coverage/{backend}_{suite}_{dtype}_inference_{device}_{accuracy,performance}.csv``,
    one pair per backend, in the dynamo harness's layout (latency in ms, memory in GB); a
    --coverage-only run, which timed nothing, has the accuracy file alone."""
    import pandas as pd

    everything = matrix(results)
    eager_peak = {r["label"]: r["peak_mb"] for r in everything if r["role"] == REFERENCE}
    records = [r for r in everything if r["role"] != REFERENCE and r["status"] != "unavailable"]
    suite = results.config.get("suite", "zoo") if results.config.get("suite") == "zoo" else "models"
    folder = Path(run_dir) / "coverage"
    written = []
    by_file: dict[tuple, list[dict[str, Any]]] = {}
    for r in records:
        by_file.setdefault((r["backend"], r["dtype"], r["device"]), []).append(r)
    for (backend, dtype, device), rows in by_file.items():
        folder.mkdir(exist_ok=True)
        stem = f"{backend}_{suite}_{dtype}_inference_{device}"
        accuracy = pd.DataFrame([{"dev": r["device"], "name": r["model"], "batch_size": r["batch"] or 1,
                                  "accuracy": HARNESS_ACCURACY[r["status"]]} for r in rows], columns=ACCURACY_COLUMNS)
        performance = pd.DataFrame([performance_row(r, eager_peak.get(r["label"])) for r in rows],
                                   columns=PERFORMANCE_COLUMNS)
        kinds = (("accuracy", accuracy),) if results.config.get("coverage_only") else (
            ("accuracy", accuracy), ("performance", performance))
        for kind, frame in kinds:
            path = folder / f"{stem}_{kind}.csv"
            atomic_write_text(path, frame.to_csv(index=False))
            written.append(path)
    return written
