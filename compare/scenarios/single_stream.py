"""--scenario single-stream (MLPerf LoadGen's SingleStream): every request timed on its own,
the next issued when the previous one returned, with p50/p90/p99/p99.9 per request.

Each sample is one request (``TimingConfig.per_request``), so a cell's samples are its
request latencies: their percentiles (``cell.scenario.request_latency_ms``) and eager's p99 over
the backend's with an interval (``cell.scenario.tail_speedup``) are derived from them."""
from __future__ import annotations

from typing import Any

from compare.measure.stats import request_percentiles, tail_speedup
from compare.results.derived import interval_block
from compare.results.roles import REFERENCE_SIDE
from compare.results.schema import Cell, RunResults
from compare.scenarios.base import Panels, ReportSection, Scenario

# Enough requests per cell for a p99.9 (1/(1-0.999)), over its processes.
SINGLE_STREAM_REQUESTS = 1000
REQUEST_NOTE = ("Single-stream (MLPerf LoadGen's SingleStream): every request timed on its own, the next issued "
                "when the last returned, eager's requests alternated with the backend's in the same workers. Each "
                "percentile is an observed request; p99 needs 100 requests and p99.9 1000, else '-'. p99 speedup: "
                "eager's p99 over the backend's, its interval resampled as the speedup's.")


class SingleStream(Scenario):
    name = "single-stream"
    rank = 20
    help = "every request timed on its own, as MLPerf's SingleStream, with p50/p90/p99/p99.9 per request"

    def timing(self, timing: dict[str, Any], args: Any) -> dict[str, Any]:
        # one request per sample, with no untimed call between requests, until the cell
        # has at least SINGLE_STREAM_REQUESTS (and its time budget is spent)
        per_process = -(-SINGLE_STREAM_REQUESTS // args.processes)
        return {**timing, "per_request": True, "sample_warmup": False,
                "min_samples": max(args.min_samples, per_process), "max_samples": 100 * SINGLE_STREAM_REQUESTS}

    def derive(self, cell: Cell, config: dict[str, Any]) -> None:
        if (config.get("timing") or {}).get("per_request", False):
            fill_request_latency(cell)

    def csv_columns(self, cell: Cell) -> dict[str, Any]:
        return request_columns(cell)

    def header(self, config: dict[str, Any]) -> str:
        minimum = config.get("timing", {}).get("min_samples", "?")
        return f"single-stream (one request per sample, at least {minimum} per process)"

    def sections(self, results: RunResults) -> list[ReportSection]:
        return [ReportSection("Per-request latency (single-stream)", request_rows(results), REQUEST_NOTE,
                              plot_title="Per-request latency", plot=plot_request_latency)]


def fill_request_latency(cell: Cell) -> None:
    """Each sample is one request, so its samples are the request latencies; the p99 ratio
    gets an interval as the speedup does."""
    pairs = {"backend": cell.latency, REFERENCE_SIDE: cell.eager_latency}
    if all(stats is not None and stats.number == 1 for stats in pairs.values()):
        cell.scenario.request_latency_ms = {name: request_percentiles(stats.samples) for name, stats in pairs.items()
                                   if stats is not None}
        if not cell.is_reference and cell.scenario.tail_speedup is None and cell.latency and cell.eager_latency:
            block = interval_block(cell)
            cell.scenario.tail_speedup = tail_speedup(cell.eager_latency, cell.latency, cell.spread.process_samples, block)


def request_columns(cell: Cell) -> dict[str, Any]:
    """results.csv's columns: the p99 speedup with its interval, each side's percentiles."""
    row: dict[str, Any] = {}
    if cell.scenario.tail_speedup:
        row.update({"tail_speedup_p99": cell.scenario.tail_speedup["ratio"], "tail_speedup_p99_ci_low": cell.scenario.tail_speedup["ci"][0],
                    "tail_speedup_p99_ci_high": cell.scenario.tail_speedup["ci"][1]})
    for side, percentiles in (cell.scenario.request_latency_ms or {}).items():
        prefix = "request" if side == "backend" else "eager_request"
        row.update({f"{prefix}_{name.replace('.', '_')}_ms": value for name, value in percentiles.items()
                    if name != "n"})
    return row


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _tail_speedup(cell: Cell) -> str:
    tail = cell.scenario.tail_speedup
    return "-" if not tail else f"{tail['ratio']:.2f}x [{tail['ci'][0]:.2f}-{tail['ci'][1]:.2f}]"


def request_rows(results: RunResults) -> list[dict[str, Any]]:
    """Per cell, the backend's and the in-cell eager's per-request percentiles."""
    rows = []
    for cell in results.cells:
        for side, pct in (cell.scenario.request_latency_ms or {}).items():
            if side == REFERENCE_SIDE and cell.is_reference:
                continue
            rows.append({"workload": cell.label, "backend": cell.backend,
                         "timed": "in-cell eager" if side == REFERENCE_SIDE else cell.backend, "requests": pct["n"],
                         **{f"{name} ms": _ms(pct[name]) for name in ("p50", "p90", "p99", "p99.9", "max")},
                         "p99 speedup [95% CI]": _tail_speedup(cell) if side == "backend" else ""})
    return rows


def plot_request_latency(results: RunResults, panels: Panels) -> str | None:
    """Each cell's per-request latency as a CDF, one panel per workload, with eager's
    requests from the same workers dashed."""
    cells = [c for c in panels.ok_cells(results) if c.scenario.request_latency_ms]
    if not cells:
        return None
    import numpy as np

    fig, axes, workloads = panels.workload_panels(cells)
    for ax, w in zip(axes, workloads):
        for c in (c for c in cells if c.label == w):
            for stats, style, name in ((c.latency, "-", c.backend), (c.eager_latency, "--", f"eager beside {c.backend}")):
                if stats is None or (c.is_reference and style == "--"):
                    continue
                ms = np.sort(stats.samples)
                ax.plot(ms, np.arange(1, ms.size + 1) / ms.size, style, linewidth=1, label=name)
        ax.set_xscale("log")
        ax.set_title(w, fontsize=9)
        ax.set_xlabel("ms per request (log)")
        ax.set_ylabel("share of requests")
        ax.legend(fontsize=6)
    return panels.finish(fig, axes, len(workloads), "Per-request latency, single-stream (CDF)")
