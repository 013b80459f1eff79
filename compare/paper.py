"""``python -m compare paper``: the survey's section-7 protocol on this machine,
with the paper's published figures beside this run's (``paper.md``)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from .results import RunResults, atomic_write_text

# The survey's own figures (RTX A6000 GPU, TorchInductor vs eager, FP32): quoted, never measured here.
PAPER_LABEL = "paper: RTX A6000 GPU, TorchInductor, FP32"
PAPER_SPEEDUP = {
    "elementwise_chain": "8.21x",
    "norm_residual": "4.43x",
    "conv": "1.12x",
    "mlp": "~1.0x (within 1%)",
    "attention": "~1.0x (slightly slower)",
}
PAPER_BREAK_EVEN = "about 1,458 to 87,000 calls; attention never"
PAPER_NUMERICS = "worst max-abs deviation 5.48e-5"
PAPER_DYNAMIC = "about 70% lower transition cost, 3.2-10.8% slower steady state"


def _fmt(value, spec: str = ".3g", none: str = "-") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return none
    if isinstance(value, str):
        return value
    return format(value, spec)


def _table(rows: list[dict[str, Any]]) -> str:
    return pd.DataFrame(rows).to_markdown(index=False) if rows else "(no data)"


def paper_markdown(results: RunResults) -> str:
    env = results.environment
    cfg = results.config
    this_run = (f"this run: {env.get('cpu_model', '?')} ({env.get('device', 'cpu')}), "
                f"{env.get('threads')} thread(s), size {cfg.get('size')}")
    cells = [c for c in results.cells if c.status == "ok"]
    failed = [c for c in results.cells if c.status != "ok"]
    timing = cfg.get("timing", {})
    out = [
        f"# The survey's experiments on this machine (run {results.run_id})",
        "",
        f"Paper figures are quoted from the survey ({PAPER_LABEL}); every other number was measured in this run "
        f"({this_run}; versions: "
        + ", ".join(f"{k} {v}" for k, v in env.get("versions", {}).items()) + ").",
        "",
        f"Common protocol: inference, FP32, float32 matmul precision 'highest', seed {cfg.get('seed')}, "
        f"{env.get('threads')} thread(s) for every backend, every cell in its own worker process, eager timed "
        f"alternately with each backend in the same worker (soft budget {timing.get('budget_s')} s, at least "
        f"{timing.get('min_samples')} samples per cell), medians reported.",
    ]

    # 1. static speedups
    rows = []
    for c in cells:
        if c.backend == "eager":
            continue
        rows.append({
            "workload": c.label, "backend": c.backend,
            "latency ms (median)": _fmt(c.latency_ms.median, ".4g"),
            "p10-p90 ms": f"{c.latency_ms.p10:.4g}-{c.latency_ms.p90:.4g}",
            "eager ms": _fmt(c.eager_latency_ms, ".4g"),
            "speedup [95% CI]": f"{c.speedup:.2f}x [{c.speedup_ci[0]:.2f}-{c.speedup_ci[1]:.2f}]" if c.speedup_ci else _fmt(c.speedup, ".2f"),
            PAPER_LABEL: PAPER_SPEEDUP.get(c.workload, "-"),
        })
    out += ["", "## 1. Static-shape speedups", "",
            "Median latency per call and speedup over eager (ratio of medians, bootstrap 95% CI).", "", _table(rows)]

    # 2. amortization
    rows = []
    for c in cells:
        if c.backend == "eager" or not c.amortization:
            continue
        row = {"workload": c.label, "backend": c.backend, "compile s": _fmt(c.compile_s, ".3g"),
               "break-even calls": f"{math.ceil(c.break_even_calls):,}" if c.break_even_calls else "never"}
        for point in c.amortization:
            if point["calls"] in (100, 10_000, 1_000_000):
                row[f"n={point['calls']:,}: compiled/eager s"] = f"{point['compiled_s']:.3g} / {point['eager_s']:.3g}"
        rows.append(row)
    out += ["", "## 2. Compile-cost amortization", "",
            "break_even = compile_s / (eager latency - compiled latency); 'never' when the compiled code is not "
            "faster. Cumulative time after n calls = compile + n x latency against n x eager latency (all decades "
            f"from 1 to 10^7 are in results.json, field `amortization`). Paper: {PAPER_BREAK_EVEN}.", "", _table(rows)]

    # 3. numerics
    rows = []
    worst = 0.0
    for c in cells:
        if c.backend == "eager":
            continue
        worst = max(worst, c.max_abs_err if isinstance(c.max_abs_err, float) else math.inf)
        rows.append({"workload": c.label, "backend": c.backend, "draws": c.numerics_draws,
                     "max abs vs eager fp32": _fmt(c.max_abs_err), "max rel vs eager fp32": _fmt(c.max_rel_err),
                     "max abs vs fp64": _fmt(c.max_abs_err_fp64), "eager's own max abs vs fp64": _fmt(c.eager_max_abs_err_fp64),
                     "within tolerance": "yes" if c.numerics_ok else f"NO: {c.numerics_error}"})
    out += ["", "## 3. Numerical agreement", "",
            f"Worst case over {cfg.get('numerics_draws', 1)} fresh seeded input draws per cell. Relative error divides "
            "by max(|reference|, atol) so references near zero do not explode it. Sampled inputs are a check, not a "
            f"proof. Worst max-abs vs eager in this run: {worst:.3g}. Paper: {PAPER_NUMERICS}.", "", _table(rows)]

    # 4. dynamic shapes
    dyn = results.experiments.get("dynamic_shapes")
    out += ["", "## 4. Dynamic shapes", ""]
    if dyn:
        proto = dyn.get("protocol", {})
        plans = dyn.get("plans", {})
        out.append(
            f"Protocol: one dimension per workload cycles through {proto.get('distinct_sizes')} distinct sizes over "
            f"{proto.get('calls')} calls (seed {proto.get('seed')}), then up to {proto.get('steady_calls_per_size')} more "
            "calls per size (at least 3, about 2 s per size at most) for the steady state. *specialize* compiles per new shape (Inductor dynamic=False with a "
            "recompile per shape; TVM/ORT/IREE one build per shape); *symbolic* compiles once with a symbolic "
            "dimension. Transition cost = compile + first call at each new shape. Compiles are read from the backend "
            f"(dynamo's graph count for Inductor). Paper: {PAPER_DYNAMIC}.")
        out.append("")
        out.append("Shapes: " + "; ".join(f"{w}: {p['dim']} in {p['values']}" for w, p in plans.items()))
        rows = []
        for r in dyn.get("summary", []):
            rows.append({
                "workload": r["workload"], "backend": r["backend"],
                "specialize: transition s (compiles)": (f"{r['specialize_transition_s']:.3g} ({r.get('specialize_compiles')})"
                                                        if "specialize_transition_s" in r else r.get("specialize_status")),
                "symbolic: transition s (compiles)": (f"{r['symbolic_transition_s']:.3g} ({r.get('symbolic_compiles')})"
                                                      if "symbolic_transition_s" in r else r.get("symbolic_status")),
                "transition cost reduction": ("-" if r.get("transition_reduction") is None
                                              else f"{r['transition_reduction'] * 100:.1f}%"),
                "steady-state slowdown (mean, range)": (_pct(r.get("steady_slowdown")) + (
                    f" ({_pct(r['steady_slowdown_range'][0])} to {_pct(r['steady_slowdown_range'][1])})"
                    if r.get("steady_slowdown_range") else "")),
                PAPER_LABEL: "~70% / 3.2-10.8%",
            })
        out += ["", _table(rows)]
        problems = [r for r in dyn.get("records", []) if r.get("status") != "ok"]
        if problems:
            out += [""] + [f"- {r['workload']} / {r['backend']} ({r['strategy']}): {r['status']}: {r.get('error')}"
                           for r in problems]
    else:
        out.append("(not run)")

    # 5. memory
    rows = [{"workload": c.label, "backend": c.backend, "peak RSS MB": _fmt(c.peak_rss_mb, ".0f"),
             "peak above baseline MB": _fmt(c.peak_rss_delta_mb, ".1f"),
             "ratio to eager": _fmt(c.peak_rss_ratio_vs_eager, ".2f")} for c in cells]
    out += ["", "## 5. Memory", "",
            "Peak resident memory of the worker through compile and the first two calls, above a baseline taken "
            "after the model and inputs exist (Linux: VmHWM after resetting it). The paper does not report memory.",
            "", _table(rows)]

    # 6. roofline
    ceilings = results.experiments.get("roofline_ceilings")
    out += ["", "## 6. Roofline", ""]
    if ceilings:
        out.append(f"Ceilings of this machine: {ceilings['peak_gflops']:.1f} GFLOP/s and {ceilings['peak_gbps']:.1f} "
                   f"GB/s ({ceilings['method']}). FLOPs from torch's flop counter (matmul/conv; pointwise ops count 0), "
                   "minimum bytes = inputs + weights + outputs once. Fraction = roofline-bound time / measured time.")
        rows = []
        for c in cells:
            if not c.roofline:
                continue
            rows.append({"workload": c.label, "backend": c.backend, "GFLOP": _fmt(c.work["flops"] / 1e9, ".3g"),
                         "MB": _fmt(c.work["min_bytes"] / 1e6, ".3g"), "bound": c.roofline["bound"],
                         "GFLOP/s": _fmt(c.roofline["achieved_gflops"], ".3g"),
                         "GB/s": _fmt(c.roofline["achieved_gbps"], ".3g"),
                         "fraction of roofline": f"{c.roofline['fraction_of_roofline'] * 100:.1f}%"})
        out += ["", _table(rows)]
    else:
        out.append(f"(ceilings not measured: {results.experiments.get('roofline_ceilings_error', 'not run')})")

    if failed:
        out += ["", "## Cells that did not run", ""] + [f"- {c.label} / {c.backend}: {c.status}: {c.error}" for c in failed]
    return "\n".join(out) + "\n"


def _pct(value) -> str:
    return "-" if value is None else f"{value * 100:+.1f}%"


def write_paper(results: RunResults, run_dir: str | Path) -> Path:
    path = Path(run_dir) / "paper.md"
    atomic_write_text(path, paper_markdown(results))
    return path
