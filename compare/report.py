"""Tables from results: read-only views of ``RunResults`` (never measure)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from .results import Cell, RunResults, atomic_write_text


def cell_row(cell: Cell) -> dict[str, Any]:
    """One flat row per cell: the CSV's columns."""
    lat = cell.latency_ms
    row: dict[str, Any] = {
        "workload": cell.workload,
        "backend": cell.backend,
        "size": cell.size,
        "batch": cell.batch,
        "dtype": cell.dtype,
        "device": cell.device,
        "status": cell.status,
        "error": cell.error,
        "compile_s": cell.compile_s,
        "latency_ms": lat.median if lat else None,
        "latency_p10_ms": lat.p10 if lat else None,
        "latency_p90_ms": lat.p90 if lat else None,
        "latency_iqr_ms": lat.iqr if lat else None,
        "latency_samples": lat.n if lat else None,
        "calls_per_sample": lat.number if lat else None,
        "eager_latency_ms": cell.eager_latency_ms,
        "speedup": cell.speedup,
        "speedup_ci_low": cell.speedup_ci[0] if cell.speedup_ci else None,
        "speedup_ci_high": cell.speedup_ci[1] if cell.speedup_ci else None,
        "noisy": cell.noisy,
        "max_abs_err": cell.max_abs_err,
        "max_rel_err": cell.max_rel_err,
        "max_abs_err_fp64": cell.max_abs_err_fp64,
        "eager_max_abs_err_fp64": cell.eager_max_abs_err_fp64,
        "numerics_ok": cell.numerics_ok,
        "break_even_calls": cell.break_even_calls,
        "peak_rss_mb": cell.peak_rss_mb,
        "peak_rss_delta_mb": cell.peak_rss_delta_mb,
        "threads": cell.threads,
        "cache": cell.cache,
    }
    for phase, seconds in cell.compile_phases.items():
        row[f"phase_{phase}_s"] = seconds
    return row


def cells_frame(results: RunResults) -> pd.DataFrame:
    return pd.DataFrame([cell_row(c) for c in results.cells])


# ----------------------------------------------------------------------------- formatting

def fmt_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if value >= 0.01 else f"{value:.4f}"


def fmt_ms(stats) -> str:
    if stats is None:
        return "-"
    return f"{stats.median:.3f} ± {stats.iqr / 2:.3f}" if stats.median < 10 else f"{stats.median:.2f} ± {stats.iqr / 2:.2f}"


def fmt_speedup(cell: Cell) -> str:
    if cell.speedup is None:
        return "-"
    text = f"{cell.speedup:.2f}x"
    if cell.speedup_ci:
        text += f" [{cell.speedup_ci[0]:.2f}-{cell.speedup_ci[1]:.2f}]"
    return text + (" (noisy)" if cell.noisy else "")


def fmt_err(value: float | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, str) or math.isinf(value) or math.isnan(value):
        return str(value)
    return f"{value:.2e}"


def fmt_break_even(cell: Cell) -> str:
    if cell.status != "ok":
        return "-"
    if cell.backend == "eager":
        return "(reference)"
    if cell.break_even_calls is None:
        return "never"
    return f"{math.ceil(cell.break_even_calls):,}"


def fmt_numerics(cell: Cell) -> str:
    if cell.numerics_ok is None:
        return "-"
    return fmt_err(cell.max_abs_err) + ("" if cell.numerics_ok else " FAIL")


def fmt_status(cell: Cell) -> str:
    notes = []
    if cell.cache in ("hit", "miss"):
        notes.append(f"cache {cell.cache}")
    tuning = cell.info.get("tuning") if isinstance(cell.info, dict) else None
    if tuning:
        notes.append("log reused" if tuning.get("reused") else f"tuned {tuning.get('trials_measured', 0)} trials")
    return cell.status + (f" ({', '.join(notes)})" if notes else "")


SUMMARY_COLUMNS = ["workload", "backend", "status", "compile s", "latency ms (median ± IQR/2)",
                   "speedup vs eager [95% CI]", "max abs err", "break-even calls"]


def summary_rows(results: RunResults) -> list[list[str]]:
    rows = []
    for cell in results.cells:
        rows.append([
            cell.label,
            cell.backend,
            fmt_status(cell),
            fmt_seconds(cell.compile_s) if cell.status == "ok" else "-",
            fmt_ms(cell.latency_ms),
            fmt_speedup(cell),
            fmt_numerics(cell),
            fmt_break_even(cell),
        ])
    return rows


def problems(results: RunResults) -> list[str]:
    out = []
    for cell in results.cells:
        if cell.status != "ok":
            out.append(f"{cell.label} / {cell.backend}: {cell.status}: {cell.error}")
        elif cell.numerics_ok is False:
            out.append(f"{cell.label} / {cell.backend}: numerics disagree with eager: {cell.numerics_error}")
    return out


def geomean_rows(results: RunResults) -> list[dict[str, Any]]:
    """Geometric-mean speedup over eager per backend, batch and dtype, over the cells that
    ran and agreed numerically (slowdowns count as such). Cells left out are counted."""
    groups: dict[tuple, list[Cell]] = {}
    for cell in results.cells:
        if cell.backend != "eager":
            groups.setdefault((cell.backend, cell.batch, cell.dtype), []).append(cell)
    rows = []
    for (backend, batch, dtype), cells in groups.items():
        counted = [c.speedup for c in cells if c.status == "ok" and c.numerics_ok is not False
                   and isinstance(c.speedup, (int, float)) and c.speedup > 0]
        geomean = math.exp(sum(math.log(x) for x in counted) / len(counted)) if counted else None
        left_out = [f"{c.workload} ({c.status if c.status != 'ok' else 'numerics'})" for c in cells
                    if not (c.status == "ok" and c.numerics_ok is not False)]
        rows.append({
            "backend": backend,
            "batch": "own" if batch is None else batch,
            "dtype": dtype,
            "geomean speedup": f"{geomean:.2f}x" if geomean else "-",
            "slower than eager": f"{sum(x < 1 for x in counted)} of {len(counted)}",
            "range": f"{min(counted):.2f}-{max(counted):.2f}x" if counted else "-",
            "left out": ", ".join(left_out) or "-",
        })
    return rows


def environment_line(results: RunResults) -> str:
    env = results.environment
    versions = env.get("versions", {})
    shown = ", ".join(f"{k} {v}" for k, v in versions.items())
    return (f"{env.get('cpu_model', '?')}, {env.get('threads', '?')} thread(s) of {env.get('cores', '?')} cores, "
            f"device {env.get('device', '?')}; {shown}")


def summary_markdown(results: RunResults) -> str:
    frame = pd.DataFrame(summary_rows(results), columns=SUMMARY_COLUMNS)
    lines = [
        f"# dlcompare run {results.run_id} ({results.state})",
        "",
        f"Environment: {environment_line(results)}",
        "",
        frame.to_markdown(index=False) if len(frame) else "(no cells)",
        "",
        "Latency: median per call with half the interquartile range; eager is timed alternately with each "
        "backend in the same worker, and the speedup interval is a bootstrap 95% CI of the ratio of medians. "
        "Break-even calls = compile s / (eager latency - backend latency).",
    ]
    geo = geomean_rows(results)
    if geo:
        lines += ["", "## Geometric-mean speedup per backend", "",
                  pd.DataFrame(geo).to_markdown(index=False), "",
                  "Over the cells that ran and agreed with the reference; cells that failed, were unavailable "
                  "or disagreed numerically are left out and listed."]
    issues = problems(results)
    if issues:
        lines += ["", "## Problems", ""] + [f"- {p}" for p in issues]
    return "\n".join(lines) + "\n"


def write_tables(results: RunResults, out_dir: str | Path) -> None:
    out_dir = Path(out_dir)
    atomic_write_text(out_dir / "results.csv", cells_frame(results).to_csv(index=False))
    atomic_write_text(out_dir / "summary.md", summary_markdown(results))


def rich_table(results: RunResults):
    from rich.table import Table

    table = Table(title=f"dlcompare {results.run_id}", caption=environment_line(results))
    for column in SUMMARY_COLUMNS:
        table.add_column(column, overflow="fold")
    styles = {"ok": "", "unavailable": "dim", "failed": "red", "timeout": "red", "out_of_memory": "red"}
    for cell, row in zip(results.cells, summary_rows(results)):
        table.add_row(*row, style=styles.get(cell.status, ""))
    return table


def rich_geomean_table(results: RunResults):
    from rich.table import Table

    rows = geomean_rows(results)
    if not rows:
        return None
    table = Table(title="geometric-mean speedup over eager (cells that ran and agreed)")
    for column in rows[0]:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    return table
