"""report.html: one self-contained page (plots embedded as PNG data URIs) built
from results.json alone. Reports read results; they never measure."""
from __future__ import annotations

import base64
import functools
import io
import json
import math
from pathlib import Path
from typing import Callable

import pandas as pd

from adapters.profiling import CATEGORIES
from compare.report.explain import OUTSIDE, category_ms, explain_frame
from compare.report.int8 import INT8_COLUMNS, calibration_line, int8_rows
from compare.report.text import (
    backend_class,
    conditions_line,
    environment_line,
    geomean_rows,
    noise_line,
    problems,
    reference_line,
    scenario_sections,
    summary_frame,
)
from compare.results.schema import Cell, RunResults, atomic_write_text


def _figure_to_data_uri(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _ok_cells(results: RunResults):
    return [c for c in results.cells if c.status == "ok" and c.latency is not None]


def _ran_cells(results: RunResults):
    """The cells that ran, timed or not (a --coverage-only run's have no latency)."""
    return [c for c in results.cells if c.status == "ok"]


def _positive(value) -> bool:
    """A value a log axis can draw: a finite number above 0 (a NaN output's error, a NaN
    speedup or a zero latency is not; the tables still show and flag those cells)."""
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _workload_panels(cells: list[Cell]):
    """The figure, its axes and the workloads (cell labels, in order) of a plot with one
    panel per workload: the prelude every per-workload plot shares."""
    workloads = list(dict.fromkeys(c.label for c in cells))
    fig, axes = _panel_grid(_plt(), len(workloads))
    return fig, axes, workloads


def _panel_grid(plt, count: int):
    """Up to three panels per row; returns the figure and its axes as a flat list."""
    cols = min(3, count)
    rows = math.ceil(count / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    return fig, list(axes.flat)


def _log_log_panel(ax, title: str, xlabel: str, ylabel: str, xbase: int = 10) -> None:
    ax.set_xscale("log", base=xbase)
    ax.set_yscale("log")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=6)


def _finish_panels(fig, axes, used: int, title: str) -> str:
    for ax in axes[used:]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    return _figure_to_data_uri(fig)


def plot_speedups(results: RunResults) -> str | None:
    cells = [c for c in _ok_cells(results) if not c.is_reference and _positive(c.speedup)]
    if not cells:
        return None
    plt = _plt()
    workloads = list(dict.fromkeys(c.label for c in cells))
    backends = list(dict.fromkeys(c.backend for c in cells))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(workloads)), 4))
    width = 0.8 / len(backends)
    for j, backend in enumerate(backends):
        xs, ys, lo, hi = [], [], [], []
        for i, w in enumerate(workloads):
            c = next((c for c in cells if c.label == w and c.backend == backend), None)
            if c is None:
                continue
            xs.append(i + (j - (len(backends) - 1) / 2) * width)
            ys.append(c.speedup)
            ci = c.speedup_ci if c.speedup_ci and all(map(_positive, c.speedup_ci)) else [c.speedup, c.speedup]
            lo.append(max(c.speedup - ci[0], 0))
            hi.append(max(ci[1] - c.speedup, 0))
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=backend)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(workloads)), workloads, rotation=20)
    ax.set_yscale("log")
    ax.set_ylabel("speedup vs eager (log; bars: 95% CI)")
    ax.legend(fontsize=8)
    ax.set_title("Speedup over eager")
    return _figure_to_data_uri(fig)


def plot_compile_phases(results: RunResults) -> str | None:
    cells = [c for c in _ran_cells(results) if not c.is_reference and c.costs.compile_phases]
    if not cells:
        return None
    plt = _plt()
    labels = [f"{c.label}\n{c.backend}" + (f" ({c.costs.cache})" if c.costs.cache else "") for c in cells]
    # Each cell lists its phases in the order they ran: keep that order, first seen first.
    phases = list(dict.fromkeys(p for c in cells for p in c.costs.compile_phases))
    fig, ax = plt.subplots(figsize=(7, max(3, 0.35 * len(cells))))
    left = [0.0] * len(cells)
    for phase in phases:
        widths = [c.costs.compile_phases.get(phase, 0.0) for c in cells]
        ax.barh(range(len(cells)), widths, left=left, label=phase)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_yticks(range(len(cells)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_xlabel("compile seconds, stacked by phase (symlog)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title("Compile time by phase")
    return _figure_to_data_uri(fig)


def plot_amortization(results: RunResults) -> str | None:
    cells = [c for c in _ok_cells(results) if c.costs.amortization]
    if not cells:
        return None
    fig, axes, workloads = _workload_panels(cells)
    for ax, w in zip(axes, workloads):
        eager_drawn = False
        for c in (c for c in cells if c.label == w):
            ns = [p["calls"] for p in c.costs.amortization]
            ax.plot(ns, [p["compiled_s"] for p in c.costs.amortization], marker=".", label=c.backend)
            if not eager_drawn:
                ax.plot(ns, [p["eager_s"] for p in c.costs.amortization], "k--", label="eager")
                eager_drawn = True
        _log_log_panel(ax, w, "calls", "cumulative s")
    return _finish_panels(fig, axes, len(workloads), "Compile + n x latency against n x eager latency")


def plot_tuning_curves(results: RunResults) -> str | None:
    """Per tuned cell, the tuner's estimate of the model's latency (TVM: calls x best kernel
    time, summed over tasks) against trials and against seconds, as its backend reports it
    (``Backend.search_curve``), with eager's and the best backend's measured latencies as
    lines, and the tuned build's own as a dot."""
    curves = [(c, curve) for c in results.cells
              if (curve := backend_class(c.backend).search_curve(c.conditions.info if isinstance(c.conditions.info, dict) else {}))]
    if not curves:
        return None
    plt = _plt()
    fig, axes = plt.subplots(len(curves), 2, figsize=(9, 2.8 * len(curves)), squeeze=False)
    for (by_trials, by_seconds), (c, curve) in zip(axes, curves):
        points = [p for p in curve if p.get("estimated_ms")]
        for ax, key, xlabel in ((by_trials, "trials", "trials measured"), (by_seconds, "s", "tuning seconds")):
            ax.plot([p[key] for p in points], [p["estimated_ms"] for p in points], marker=".",
                    label="the tuner's estimate (kernels only)")
            _reference_lines(ax, results, c, points[-1][key] if points else None)
            if key == "s":
                _other_tuners(ax, results, c)
            ax.set_yscale("log")
            ax.set_xlabel(xlabel)
            ax.set_ylabel("ms per call")
            ax.set_title(f"{c.label} / {c.backend}", fontsize=9)
            ax.legend(fontsize=5)
    fig.suptitle("Tuning: best latency found vs trials and vs seconds")
    fig.tight_layout()
    return _figure_to_data_uri(fig)


def _peers(results: RunResults, cell) -> list:
    """The measured cells of the cell's workload, size and device, itself included."""
    return [c for c in _ok_cells(results) if (c.label, c.size, c.device) == (cell.label, cell.size, cell.device)]


def _reference_lines(ax, results: RunResults, cell, x_end) -> None:
    """Eager's and the best backend's latencies for the cell's workload, and the tuned
    build's measured latency at the end of its curve."""
    peers = _peers(results, cell)
    eager = next((c for c in peers if c.is_reference), None)
    others = [c for c in peers if not c.is_reference and c.backend != cell.backend]
    if eager is not None:
        ax.axhline(eager.latency.median, color="black", linestyle="--", linewidth=0.8, label="eager")
    if others:
        best = min(others, key=lambda c: c.latency.median)
        ax.axhline(
            best.latency.median, color="green", linestyle=":", linewidth=0.8, label=f"best other: {best.backend}"
        )
    if cell.latency is not None and x_end is not None:
        ax.plot([x_end], [cell.latency.median], "o", color="red", label=f"{cell.backend} measured")


def _other_tuners(ax, results: RunResults, cell) -> None:
    """Every other backend that tuned this workload (Inductor's max-autotune: its GEMM
    autotuning), as a point at its own tuning seconds and its measured latency."""
    for other in _peers(results, cell):
        if other.backend != cell.backend and other.costs.tuning_s:
            ax.plot([other.costs.tuning_s], [other.latency.median], "s", label=f"{other.backend} (its tuning s)")


def plot_dynamic(results: RunResults) -> str | None:
    rows = [r for r in (results.experiments.get("dynamic_shapes") or {}).get("summary", [])
            if "specialize_transition_s" in r and "symbolic_transition_s" in r]
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(rows)), 3.5))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [max(r["specialize_transition_s"], 1e-4) for r in rows], 0.4, label="specialize")
    ax.bar([x + 0.2 for x in xs], [max(r["symbolic_transition_s"], 1e-4) for r in rows], 0.4, label="symbolic")
    ax.set_xticks(list(xs), [f"{r['workload']}\n{r['backend']}" for r in rows], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("s per shape transition beyond a steady call")
    ax.set_title("Dynamic shapes: cost per shape transition (after a warm-up size)")
    ax.legend()
    return _figure_to_data_uri(fig)


def plot_roofline(results: RunResults) -> str | None:
    ceilings = results.experiments.get("roofline_ceilings")
    cells = [c for c in _ok_cells(results) if c.instruments.roofline and c.instruments.roofline.get("arithmetic_intensity")]
    if not ceilings or not cells:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    ai_min = min(c.instruments.roofline["arithmetic_intensity"] for c in cells) / 4
    ai_max = max(c.instruments.roofline["arithmetic_intensity"] for c in cells) * 4
    xs = [ai_min * (ai_max / ai_min) ** (i / 50) for i in range(51)]
    ax.plot(xs, [min(ceilings["peak_gflops"], x * ceilings["peak_gbps"]) for x in xs], "k-", label="roofline")
    for backend in dict.fromkeys(c.backend for c in cells):
        pts = [c for c in cells if c.backend == backend]
        ax.scatter([c.instruments.roofline["arithmetic_intensity"] for c in pts], [c.instruments.roofline["achieved_gflops"] for c in pts],
                   label=backend, s=18)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity, FLOP/byte (counted FLOPs / minimum bytes)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.legend(fontsize=7)
    ax.set_title("Roofline of this machine")
    return _figure_to_data_uri(fig)


def plot_numerics(results: RunResults) -> str | None:
    cells = [c for c in _ran_cells(results) if not c.is_reference and isinstance(c.numerics.max_abs_err, float)
             and math.isfinite(c.numerics.max_abs_err)]
    if not cells:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, max(3, 0.3 * len(cells))))
    ax.barh(range(len(cells)), [max(c.numerics.max_abs_err, 1e-12) for c in cells],
            color=["tab:blue" if c.numerics.numerics_ok else "tab:red" for c in cells])
    ax.set_yticks(range(len(cells)), [f"{c.label} / {c.backend}" for c in cells], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("max abs error vs eager fp32 (red: beyond tolerance)")
    ax.set_title("Numerical agreement")
    return _figure_to_data_uri(fig)


def plot_batch_scaling(results: RunResults) -> str | None:
    """Throughput against batch size, one panel per workload and dtype (batch sweeps only)."""
    cells = [c for c in _ok_cells(results) if c.batch is not None and c.latency]
    if len({c.batch for c in cells}) < 2:
        return None
    plt = _plt()
    panels = list(dict.fromkeys((c.workload, c.dtype) for c in cells))
    fig, axes = _panel_grid(plt, len(panels))
    for ax, (w, dtype) in zip(axes, panels):
        for backend in dict.fromkeys(c.backend for c in cells):
            points = sorted((c.batch, c.batch / (c.latency.median / 1e3)) for c in cells
                            if c.workload == w and c.dtype == dtype and c.backend == backend)
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=backend)
        _log_log_panel(ax, w if dtype == "fp32" else f"{w} ({dtype})", "batch", "samples / s", xbase=2)
    return _finish_panels(fig, axes, len(panels), "Throughput by batch size (median latency)")


def plot_time_breakdown(results: RunResults) -> str | None:
    """Per workload: each backend's kernel ms per call, stacked by category (--explain)."""
    cells = [c for c in _ok_cells(results) if c.instruments.profile and "kernels" in c.instruments.profile]
    if not cells:
        return None
    fig, axes, workloads = _workload_panels(cells)
    for ax, workload in zip(axes, workloads):
        mine = [c for c in cells if c.label == workload]
        left = [0.0] * len(mine)
        for category in (*CATEGORIES, OUTSIDE):
            widths = [category_ms(c.instruments.profile)[category] for c in mine]
            ax.barh(range(len(mine)), widths, left=left, label=category)
            left = [a + b for a, b in zip(left, widths)]
        ax.set_yticks(range(len(mine)), [c.backend for c in mine], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("ms per profiled call")
        ax.set_title(workload, fontsize=9)
    axes[0].legend(fontsize=6)
    return _finish_panels(fig, axes, len(workloads), "Where the time goes (each backend's own profiler)")


class _Panels:
    """The helpers a scenario's plot draws with (``compare.scenarios.Panels``)."""

    ok_cells = staticmethod(_ok_cells)
    workload_panels = staticmethod(_workload_panels)
    finish = staticmethod(_finish_panels)


def scenario_plots(results: RunResults) -> list[tuple[str, Callable[[RunResults], str | None]]]:
    """The plots of the scenarios' sections that have rows, as PLOTS lists its own."""
    return [(section.plot_title or section.title, functools.partial(section.plot, panels=_Panels()))
            for section in scenario_sections(results) if section.plot]


PLOTS = [
    ("Speedup vs eager", plot_speedups),
    ("Batch scaling", plot_batch_scaling),
    ("Compile time by phase", plot_compile_phases),
    ("Amortization", plot_amortization),
    ("Tuning curves", plot_tuning_curves),
    ("Dynamic shapes", plot_dynamic),
    ("Roofline", plot_roofline),
    ("Numerical agreement", plot_numerics),
    ("Where the time goes", plot_time_breakdown),
]

# Checked by the browser test: every image decoded, no script error.
_CHECK_SCRIPT = """
window.__errors = [];
window.addEventListener('error', function (e) { window.__errors.push(String(e.message)); });
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var good = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.setAttribute('data-images', good + '/' + imgs.length);
  document.body.setAttribute('data-errors', String(window.__errors.length));
});
"""


def templates():
    """The Jinja2 environment of report.html and diff.html (autoescaped)."""
    import jinja2

    return jinja2.Environment(loader=jinja2.PackageLoader("compare.report", "templates"),
                              autoescape=jinja2.select_autoescape(["html"]))


def draw_plots(results: RunResults) -> tuple[list[tuple[str, str]], list[str]]:
    """Every plot that has data, and a line for each that could not be drawn: one plot's
    failure (matplotlib on data no one foresaw) costs that plot, never the report."""
    plots, failures = [], []
    # the scenarios' own plots right after the headline speedups
    for title, plot in [*PLOTS[:1], *scenario_plots(results), *PLOTS[1:]]:
        try:
            uri = plot(results)
        except Exception as exc:
            failures.append(f"{title}: not drawn ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
            continue
        if uri:
            plots.append((title, uri))
    return plots, failures


def coverage_grid(results: RunResults) -> dict | None:
    """The coverage matrix as report.html's coloured grid: cells' text and status (the class
    that colours them), with the per-backend rows below it."""
    from compare.report import coverage

    if not coverage.applies(results) or not (records := coverage.matrix(results)):
        return None
    header, rows = coverage.grid(records)
    return {"header": header, "rows": rows,
            "backends": pd.DataFrame(coverage.backend_rows(records)).to_html(index=False, escape=True)}


def render_html(results: RunResults) -> str:
    geo = geomean_rows(results)
    plots, plot_failures = draw_plots(results)
    return templates().get_template("report.html").render(
        coverage=coverage_grid(results),
        run_id=results.run_id, state=results.state, check_script=_CHECK_SCRIPT,
        environment_line=environment_line(results), conditions_line=conditions_line(results), noise_line=noise_line(results),
        reference_line=reference_line(results) or "",
        summary_table=summary_frame(results).to_html(index=False, escape=True),
        geomean_table=pd.DataFrame(geo).to_html(index=False, escape=True) if geo else None,
        scenario_sections=[(section.title, pd.DataFrame(section.rows).to_html(index=False, escape=True), section.note)
                           for section in scenario_sections(results)],
        int8_table=pd.DataFrame(int8, columns=INT8_COLUMNS).to_html(index=False, escape=True) if (int8 := int8_rows(results))
        else None, calibration_line=calibration_line(results),
        explain_table=explain.fillna("-").to_html(index=False, escape=True) if len(explain := explain_frame(results)) else None,
        plots=plots, plot_failures=plot_failures,
        problems=problems(results),  # failed, timed out, out of memory, unavailable, numerics off
        environment_json=json.dumps(results.environment, indent=2), config_json=json.dumps(results.config, indent=2))


def write_html(results: RunResults, run_dir: str | Path) -> Path:
    path = Path(run_dir) / "report.html"
    atomic_write_text(path, render_html(results))
    return path
