"""``python -m compare paper``: the survey's section-7 protocol on this machine,
with the paper's published figures beside this run's (``paper.md``)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from compare.report.text import fmt_break_even
from compare.results.schema import RunResults, atomic_write_text

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
    return format(value, spec)


def _table(rows: list[dict[str, Any]]) -> str:
    return pd.DataFrame(rows).to_markdown(index=False) if rows else "(no data)"


def paper_markdown(results: RunResults) -> str:
    """paper.md: the protocol, then one section per experiment of the survey."""
    cells = [c for c in results.cells if c.status == "ok"]
    compiled = [c for c in cells if not c.is_reference]
    out = _header(results)
    out += _speedup_section(compiled)
    out += _amortization_section(compiled)
    out += _numerics_section(compiled, results.config)
    dyn = results.experiments.get("dynamic_shapes")
    out += ["", "## 4. Dynamic shapes", ""] + (_dynamic_section(dyn) if dyn else ["(not run)"])
    out += _memory_section(cells, results)
    out += _roofline_section(cells, results.experiments)
    out += _fusion_section(cells)
    failed = [c for c in results.cells if c.status != "ok"]
    if failed:
        out += ["", "## Cells that did not run", ""] + [f"- {c.label} / {c.backend}: {c.status}: {c.error}" for c in failed]
    return "\n".join(out) + "\n"


def _allocator(results: RunResults) -> str:
    return results.environment.get("allocator", results.config.get("allocator", "glibc-tuned"))


def _header(results: RunResults) -> list[str]:
    env, cfg = results.environment, results.config
    this_run = (f"this run: {env.get('cpu_model', '?')} ({env.get('device', 'cpu')}), "
                f"{env.get('threads')} thread(s), size {cfg.get('size')}")
    timing = cfg.get("timing", {})
    return [
        f"# The survey's experiments on this machine (run {results.run_id})",
        "",
        f"Paper figures are quoted from the survey ({PAPER_LABEL}); every other number was measured in this run "
        f"({this_run}; versions: "
        + ", ".join(f"{k} {v}" for k, v in env.get("versions", {}).items()) + ").",
        "",
        f"Common protocol: inference, FP32, float32 matmul precision 'highest', seed {cfg.get('seed')}, "
        f"{env.get('threads')} thread(s) for every backend, every cell in its own worker process, eager timed "
        f"alternately with each backend in the same worker (soft budget {timing.get('budget_s')} s, at least "
        f"{timing.get('min_samples')} samples per process), {cfg.get('processes', 1)} fresh worker process(es) per "
        f"cell with their samples pooled, medians reported. Allocator: {_allocator(results)}.",
    ]


def _speedup_cell(c) -> str:
    if c.speedup_ci:
        return f"{c.speedup:.2f}x [{c.speedup_ci[0]:.2f}-{c.speedup_ci[1]:.2f}]"
    return _fmt(c.speedup, ".2f")


def _speedup_section(cells) -> list[str]:
    rows = [{"workload": c.label, "backend": c.backend,
             "latency ms (median)": _fmt(c.latency.median, ".4g"),
             "p10-p90 ms": f"{c.latency.p10:.4g}-{c.latency.p90:.4g}",
             "eager ms": _fmt(c.eager_median_ms, ".4g"),
             "speedup [95% CI]": _speedup_cell(c),
             PAPER_LABEL: PAPER_SPEEDUP.get(c.workload, "-")} for c in cells]
    return ["", "## 1. Static-shape speedups", "",
            "Median latency per call and speedup over eager (ratio of medians, bootstrap 95% CI).", "", _table(rows)]


def _amortization_section(cells) -> list[str]:
    rows = []
    for c in cells:
        if not c.costs.amortization:
            continue
        row = {"workload": c.label, "backend": c.backend, "compile s": _fmt(c.compile_s, ".3g"),
               "tuning s behind the log": _fmt(c.costs.tuning_s, ".0f") if "tune" in c.costs.compile_phases else "-",
               "break-even calls [95% CI]": fmt_break_even(c)}
        for point in c.costs.amortization:
            if point["calls"] in (100, 10_000, 1_000_000):
                row[f"n={point['calls']:,}: compiled/eager s"] = f"{point['compiled_s']:.3g} / {point['eager_s']:.3g}"
        rows.append(row)
    return ["", "## 2. Compile-cost amortization", "",
            "break_even = everything paid / (eager latency - compiled latency), where everything paid is the "
            "compile time plus, for a tuned backend, all the tuning behind its log (run now or earlier; the figure "
            "without tuning is in parentheses). 'never' when the speedup's 95% interval reaches 1. The interval "
            "comes from the same paired bootstrap as the speedup. Cumulative time after n calls = compile + n x "
            "latency against n x eager latency (all decades from 1 to 10^7 are in results.json, field "
            f"`amortization`). Paper: {PAPER_BREAK_EVEN}.", "", _table(rows)]


def _numerics_section(cells, cfg: dict[str, Any]) -> list[str]:
    rows = [{"workload": c.label, "backend": c.backend, "draws": c.numerics.numerics_draws,
             "max abs vs eager fp32": _fmt(c.numerics.max_abs_err), "max rel vs eager fp32": _fmt(c.numerics.max_rel_err),
             "max abs vs fp64": _fmt(c.numerics.max_abs_err_fp64), "eager's own max abs vs fp64": _fmt(c.numerics.eager_max_abs_err_fp64),
             "within tolerance": "yes" if c.numerics.numerics_ok else f"NO: {c.numerics.numerics_error}"} for c in cells]
    # a non-finite error is stored as null: the worst case then is "not a number"
    worst = max((math.inf if c.numerics.max_abs_err is None else c.numerics.max_abs_err for c in cells), default=0.0)
    return ["", "## 3. Numerical agreement", "",
            f"Worst case over {cfg.get('numerics_draws', 1)} fresh seeded input draws per cell. Relative error divides "
            "by max(|reference|, atol) so references near zero do not explode it. Sampled inputs are a check, not a "
            f"proof. Worst max-abs vs eager in this run: {worst:.3g}. Paper: {PAPER_NUMERICS}.", "", _table(rows)]


def _memory_section(cells, results: RunResults) -> list[str]:
    rows = [{"workload": c.label, "backend": c.backend, "load MB": _fmt(c.memory.load_mb, ".0f"),
             "compile peak MB": _fmt(c.memory.compile_peak_mb, ".0f"),
             "of which child processes": _fmt(c.memory.compile_children_peak_mb, ".0f"),
             "steady state MB": _fmt(c.memory.steady_state_mb, ".1f"), "one call's transient MB": _fmt(c.memory.call_peak_mb, ".1f")}
            for c in cells]
    return ["", "## 5. Memory", "",
            "Three figures per cell, in MB. *Load*: the resident memory that importing the backend's libraries and "
            "runtime added. *Compile peak*: the high-water mark of the worker plus its child processes (Inductor's "
            "compile workers, TVM's builder and runner pools; sampled every 20 ms, the worker's own peak exact) "
            "through compile and the first two calls, above the RSS after loading. *Steady state*: what stays "
            "resident after warm-up above the RSS after loading (compiled code, constants, arenas), read after "
            "glibc's malloc_trim so that it does not depend on the trim threshold. Allocator of this run: "
            f"{_allocator(results)}. Under glibc-tuned and system glibc the "
            "figures are comparable; under jemalloc/tcmalloc freed pages stay with the allocator, so compile "
            "leftovers count in the steady state. The paper does not report memory.", "", _table(rows)]


def _roofline_section(cells, experiments: dict[str, Any]) -> list[str]:
    ceilings = experiments.get("roofline_ceilings")
    out = ["", "## 6. Roofline", ""]
    if not ceilings:
        return out + [f"(ceilings not measured: {experiments.get('roofline_ceilings_error', 'not run')})"]
    from compare.measure.roofline import ceiling_check

    out.append(f"Ceilings of this machine: compute {ceilings['peak_gflops']:.1f} GFLOP/s "
               f"({ceilings.get('compute_source', ceilings['method'])}); memory {ceilings['peak_gbps']:.1f} GB/s "
               f"({ceilings.get('memory_source', ceilings['method'])}). FLOPs = torch's flop counter for "
               "matmul/conv plus a documented per-element cost for pointwise, normalization and reduction ops "
               "(transcendentals cost 10-16, see compare/roofline.py); minimum bytes = inputs + weights + "
               "outputs once. Fraction = roofline-bound time / measured time.")
    rows = [{"workload": c.label, "backend": c.backend, "GFLOP": _fmt(c.instruments.work["flops"] / 1e9, ".3g"),
             "of which pointwise": _fmt(c.instruments.work.get("pointwise_flops", 0) / 1e9, ".3g"),
             "MB": _fmt(c.instruments.work["min_bytes"] / 1e6, ".3g"), "bound": c.instruments.roofline["bound"],
             "GFLOP/s": _fmt(c.instruments.roofline["achieved_gflops"], ".3g"),
             "GB/s": _fmt(c.instruments.roofline["achieved_gbps"], ".3g"),
             "fraction of roofline": f"{c.instruments.roofline['fraction_of_roofline'] * 100:.1f}%"}
            for c in cells if c.instruments.roofline]
    out += ["", _table(rows)]
    exceeded = ceiling_check(cells, ceilings)
    out += ["", "Where a measured ceiling does not bound what a backend reached:", ""]
    return out + ([f"- {note}" for note in exceeded] if exceeded else ["- nowhere: every cell is under both ceilings."])


FUSION_WORKLOADS = ("elementwise_chain", "norm_residual")  # the survey's fusion-friendly graphs


def _fusion_section(cells) -> list[str]:
    """Kernels per call (from each backend's own profiler, --explain) and the memory
    traffic each backend achieved, for the graphs the survey's fusion argument is about."""
    from compare.report.explain import launches

    out = ["", "## 7. Fusion, from the profiles", "",
           "The survey's argument (sections 5 and 7): on a chain of pointwise or normalization ops, time goes to "
           "moving each intermediate through memory, so a compiler that fuses the chain into few kernels reads and "
           "writes less and wins most there. *Kernels per call* come from each backend's own profiler "
           "(`--explain`), eager's op count from `torch.profiler`; *achieved GB/s* is the graph's minimum traffic "
           "(inputs + weights + outputs, once) over the measured median, so fusion shows as fewer kernels and more "
           "of the minimum traffic per second.", ""]
    chosen = [c for c in cells if c.workload in FUSION_WORKLOADS]
    eager_ops = {c.label: launches(c.instruments.profile) for c in chosen
                 if c.is_reference and c.instruments.profile and "kernels" in c.instruments.profile}
    rows = [{"workload": c.label, "backend": c.backend, "kernels per call": round(launches(c.instruments.profile), 1),
             "eager ops per call": _fmt(eager_ops.get(c.label), ".0f"),
             "minimum MB": _fmt(c.instruments.work["min_bytes"] / 1e6, ".3g") if c.instruments.work else "-",
             "achieved GB/s": (_fmt(c.instruments.work["min_bytes"] / (c.latency.median * 1e-3) / 1e9, ".3g")
                               if c.instruments.work and c.latency else "-"),
             "speedup": _speedup_cell(c) if not c.is_reference else "1.00x"}
            for c in chosen if c.instruments.profile and "kernels" in c.instruments.profile]
    if not rows:
        return out + ["(no kernel profiles: run `compare paper --explain` for this part)"]
    return out + [_table(rows), "", f"Paper: {PAPER_SPEEDUP['elementwise_chain']} on the chain and "
                  f"{PAPER_SPEEDUP['norm_residual']} on norm-residual, TorchInductor on a GPU."]


def _dynamic_section(dyn: dict[str, Any]) -> list[str]:
    proto = dyn.get("protocol", {})
    plans = dyn.get("plans", {})
    out = [
        f"Protocol: one dimension per workload takes K = {proto.get('distinct_sizes')} distinct sizes over a seeded "
        f"sequence of {proto.get('calls')} calls (seed {proto.get('seed')}). Each strategy runs in its own worker, "
        "warmed first on a throwaway size outside the K (one-time costs, the symbolic compile among them, land "
        "there: the warm-up column). A *transition* is the first call at one of the K sizes; its cost is that "
        "call's time beyond a steady call at the same size, averaged over the K transitions. *specialize* compiles "
        "per new shape (Inductor dynamic=False, recompiling per shape; TVM/ORT/IREE one build per shape); "
        "*symbolic* compiles once with a symbolic dimension. The steady-state slowdown of symbolic over "
        "specialized code is timed alternately in a third worker that holds both, at every size (geometric mean "
        f"over sizes, paired-bootstrap 95% interval). Paper: {PAPER_DYNAMIC}.", "",
        "Sizes: " + "; ".join(f"{w}: {p['dim']} in {p['values']} (warm-up {p.get('warmup_value')})"
                               for w, p in plans.items()),
    ]
    rows = []
    for r in dyn.get("summary", []):
        rows.append({
            "workload": r["workload"], "backend": r["backend"], "K": r.get("transitions", "-"),
            "specialize: s per transition (warm-up s)": _strategy_cell(r, "specialize"),
            "symbolic: s per transition (warm-up s)": _strategy_cell(r, "symbolic"),
            "transition cost reduction": ("-" if r.get("transition_reduction") is None
                                          else f"{r['transition_reduction'] * 100:.1f}%"),
            "steady-state slowdown [95% CI]": (_pct(r.get("steady_slowdown")) + (
                f" [{_pct(r['steady_slowdown_ci'][0])} to {_pct(r['steady_slowdown_ci'][1])}]"
                if r.get("steady_slowdown_ci") else "")) if "steady_slowdown" in r else r.get("steady_status", "-"),
            PAPER_LABEL: "~70% / 3.2-10.8%",
        })
    out += ["", _table(rows)]
    problems = [r for r in dyn.get("records", []) if r.get("status") != "ok"]
    if problems:
        out += [""] + [f"- {r['workload']} / {r['backend']} ({r['strategy']}): {r['status']}: {r.get('error')}"
                       for r in problems]
    return out


def _strategy_cell(row: dict[str, Any], name: str) -> str:
    if f"{name}_transition_s" not in row:
        return str(row.get(f"{name}_status"))
    return f"{row[f'{name}_transition_s']:.3g} ({row[f'{name}_warmup_s']:.3g})"


def _pct(value) -> str:
    return "-" if value is None else f"{value * 100:+.1f}%"


def write_paper(results: RunResults, run_dir: str | Path) -> Path:
    path = Path(run_dir) / "paper.md"
    atomic_write_text(path, paper_markdown(results))
    return path
