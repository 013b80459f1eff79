"""Tables from results: read-only views of ``RunResults`` (never measure)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from compare.measure.stats import geometric_mean
from compare.report.backends import backend_class
from compare.report.crosscheck import crosscheck_markdown
from compare.report.explain import explain_markdown
from compare.report.int8 import int8_markdown
from compare.results.derived import EAGER_ONLY, REFERENCE_TOLERANCE, reference_spread
from compare.results.schema import Cell, RunResults, atomic_write_text, cells_frame
from compare.scenarios import DEFAULT, ReportSection, scenarios

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


def fmt_process_spread(cell: Cell) -> str:
    """Each process's own speedup, lowest to highest: the between-process spread."""
    if not cell.spread.speedup_processes:
        return "-"
    values = sorted(cell.spread.speedup_processes)
    return f"{values[0]:.2f}-{values[-1]:.2f}x ({len(values)})"


def fmt_warm_start(cell: Cell) -> str:
    if cell.costs.warm_start_s is None:
        return "-"
    return fmt_seconds(cell.costs.warm_start_s) + (f" ({cell.costs.warm_cache})" if cell.costs.warm_cache and cell.costs.warm_cache != "hit"
                                             else "")


def fmt_err(value: float | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, str) or math.isinf(value) or math.isnan(value):
        return str(value)
    return f"{value:.2e}"


def _calls(value: float) -> str:
    return f"{math.ceil(value):,}"


def fmt_break_even(cell: Cell) -> str:
    if cell.status != "ok":
        return "-"
    if cell.is_reference:
        return "(reference)"
    if cell.costs.break_even_calls is None:
        if cell.costs.break_even_note and cell.costs.break_even_note.startswith("unknown"):
            excl = cell.costs.break_even_calls_excl_tuning
            return "unknown with tuning" + (f"; {_calls(excl)} without" if excl else "")
        return "never"
    text = _calls(cell.costs.break_even_calls)
    if cell.costs.break_even_ci:
        text += f" [{_calls(cell.costs.break_even_ci[0])}-{_calls(cell.costs.break_even_ci[1])}]"
    if cell.costs.break_even_calls_excl_tuning is not None:
        text += f" ({_calls(cell.costs.break_even_calls_excl_tuning)} without tuning)"
    return text


def fmt_reference(cell: Cell) -> str:
    """The in-cell eager median, and how far it is from the eager-only cell's."""
    if cell.eager_median_ms is None:
        return "-"
    text = f"{cell.eager_median_ms:.4g}"
    if not cell.is_reference and cell.spread.reference_deviation is not None:
        flag = " !" if abs(cell.spread.reference_deviation) > REFERENCE_TOLERANCE else ""
        text += f" ({cell.spread.reference_deviation * 100:+.1f}%{flag})"
    return text


def fmt_numerics(cell: Cell) -> str:
    if cell.numerics.numerics_ok is None:
        return "-"
    return fmt_err(cell.numerics.max_abs_err) + ("" if cell.numerics.numerics_ok else " FAIL")


def fmt_status(cell: Cell) -> str:
    notes = []
    if cell.costs.cache in ("hit", "miss", "bypass"):
        notes.append(f"cache {cell.costs.cache}")
    info = cell.conditions.info if isinstance(cell.conditions.info, dict) else {}
    notes += backend_class(cell.backend).status_notes(info, cell.costs.tuning_s)
    check = cell.instruments.crosscheck or {}
    if check.get("flagged"):
        notes.append(f"own tool {check['ratio'] - 1:+.0%}: {check['tool']}")
    return cell.status + (f" ({', '.join(notes)})" if notes else "")


SUMMARY_COLUMNS = ["workload", "backend", "status", "compile s", "warm start s", "first result s",
                   "latency ms (median ± IQR/2)", "in-cell eager ms (vs eager-only)", "speedup vs eager [95% CI]",
                   "per process", "max abs err", "break-even calls [95% CI]"]
# The columns a --coverage-only run has no figure for: it times nothing.
TIMING_COLUMNS = ("warm start s", "latency ms (median ± IQR/2)", "in-cell eager ms (vs eager-only)",
                  "speedup vs eager [95% CI]", "per process", "break-even calls [95% CI]")


def coverage_only(results: RunResults) -> bool:
    """A run made with --coverage-only: compiled, called once and checked, never timed."""
    return bool(results.config.get("coverage_only"))


def summary_frame(results: RunResults) -> pd.DataFrame:
    """The cells' table, as summary.md, report.html and the terminal show it; a coverage-only
    run leaves out the timing columns (TIMING_COLUMNS)."""
    frame = pd.DataFrame(summary_rows(results), columns=SUMMARY_COLUMNS)
    return frame.drop(columns=list(TIMING_COLUMNS)) if coverage_only(results) else frame


def summary_rows(results: RunResults) -> list[list[str]]:
    rows = []
    for cell in results.cells:
        rows.append([
            cell.label,
            cell.backend,
            fmt_status(cell),
            fmt_seconds(cell.compile_s) if cell.status == "ok" else "-",
            fmt_warm_start(cell),
            fmt_seconds(cell.costs.time_to_first_result_s) if cell.status == "ok" else "-",
            fmt_ms(cell.latency),
            fmt_reference(cell),
            fmt_speedup(cell),
            fmt_process_spread(cell),
            fmt_numerics(cell),
            fmt_break_even(cell),
        ])
    return rows


def problems(results: RunResults) -> list[str]:
    out = []
    for cell in results.cells:
        if cell.status != "ok":
            out.append(f"{cell.label} / {cell.backend}: {cell.status}: {cell.error}")
        elif cell.numerics.numerics_ok is False:
            out.append(f"{cell.label} / {cell.backend}: numerics disagree with eager: {cell.numerics.numerics_error}")
    return out


def _counted(cell: Cell) -> bool:
    return (cell.status == "ok" and cell.numerics.numerics_ok is not False
            and isinstance(cell.speedup, (int, float)) and cell.speedup > 0)


def geomean_rows(results: RunResults) -> list[dict[str, Any]]:
    """Geometric-mean speedup over eager per backend, batch and dtype, over one common set
    of workloads: those where every backend of the group ran and agreed numerically, so
    that no backend's mean leaves out the workloads it is bad at. Slowdowns count as
    such; every cell left out is listed with the reason. A backend that ran nowhere in the
    group does not empty the common set: it gets its own row saying so."""
    groups: dict[tuple, list[Cell]] = {}
    for cell in [] if coverage_only(results) else results.cells:  # a coverage-only run has no speedup
        if not cell.is_reference:
            groups.setdefault((cell.batch, cell.dtype), []).append(cell)
    rows = []
    for (batch, dtype), cells in groups.items():
        backends = list(dict.fromkeys(c.backend for c in cells))
        counted = {b: {c.workload: c.speedup for c in cells if c.backend == b and _counted(c)} for b in backends}
        present = [b for b in backends if counted[b]]
        common = set.intersection(*(set(counted[b]) for b in present)) if present else set()
        for backend in backends:
            values = [counted[backend][w] for w in sorted(common) if w in counted[backend]]
            geomean = geometric_mean(values)
            left_out = [f"{c.workload} ({_why_left_out(c)})" for c in cells
                        if c.backend == backend and c.workload not in common]
            rows.append({
                "backend": backend,
                "batch": "own" if batch is None else batch,
                "dtype": dtype,
                "geomean speedup": f"{geomean:.2f}x" if geomean else "-",
                "common cells": len(values),
                "slower than eager": f"{sum(x < 1 for x in values)} of {len(values)}",
                "range": f"{min(values):.2f}-{max(values):.2f}x" if values else "-",
                "left out": ", ".join(left_out) or "-",
            })
    return rows


def _why_left_out(cell: Cell) -> str:
    if cell.status != "ok":
        return cell.status
    if cell.numerics.numerics_ok is False:
        return "numerics"
    if not _counted(cell):
        return "no speedup"
    return "another backend has no figure here"


def environment_line(results: RunResults) -> str:
    env = results.environment
    versions = env.get("versions", {})
    shown = ", ".join(f"{k} {v}" for k, v in versions.items())
    return (f"{env.get('cpu_model', '?')} ({isa_line(env)}), device {env.get('device', '?')}; {shown}")


def isa_line(env: dict[str, Any]) -> str:
    flags = env.get("cpu_flags") or []
    wide = [f for f in flags if f.startswith(("avx512f", "amx"))] or [f for f in flags if f.startswith("avx2")]
    return ", ".join(wide) or "no AVX2"


def reference_processes(results: RunResults) -> int:
    """How many processes the eager-only reference ran in, as its cells recorded it (one
    when eager ran alone, K x ceil(reference/K) with --processes K)."""
    counts = [len(c.spread.process_samples) for c in results.cells if c.is_reference and c.spread.process_samples]
    return max(counts, default=results.config.get("reference_processes", 1))


def conditions_line(results: RunResults) -> str:
    """The run conditions that move headline figures, stated next to them."""
    env, cfg = results.environment, results.config
    cache = cfg.get("cache", "cold")
    processes = cfg.get("processes", 1)
    warm = " (the first compiles, the others load its artifact)" if processes > 1 and cache == "cold" else ""
    affinity = f"; pinned to CPUs {','.join(map(str, cfg['affinity']))}" if cfg.get("affinity") else ""
    timing = ("coverage only: no timing (one worker per cell compiles, calls once and checks the numerics)"
              if coverage_only(results) else
              f"scenario {scenario_text(cfg)}; {processes} worker process(es) per cell{warm}{extra_text(results)}"
              f" ({reference_processes(results)} for the reference){estimator_text(results)}")
    return (f"{env.get('threads', '?')} thread(s) of {env.get('cores', '?')} cores for every backend{affinity}; "
            f"allocator {env.get('allocator', cfg.get('allocator', 'glibc-tuned'))}; "
            f"thread spin {cfg.get('thread_spin', 'default')}; "
            f"{timing}; cache {cache}"
            f"{precision_text(results)}{reference_text(results)}{backend_conditions(results)}{pinning_text(results)}"
            f"{preset_text(cfg)}")


def extra_text(results: RunResults) -> str:
    """--max-processes: how many cells took more processes than --processes, and up to how many."""
    cfg = results.config
    processes, most = cfg.get("processes", 1), cfg.get("max_processes") or 0
    if most <= processes:
        return ""
    more = sum(1 for c in results.cells if not c.is_reference and len(c.spread.process_samples or []) > processes)
    return (f", up to {most} for a cell whose speedup interval was still wider than ±5 % "
            f"({more} cell(s) took more)")


def estimator_text(results: RunResults) -> str:
    """What each speedup is divided by (compare.results.derived.fill_speedup): the eager-only
    processes timed in the same stretches as the cell, or the eager alternated in its worker."""
    counts: dict[str, int] = {}
    for cell in results.cells:
        reference = (cell.spread.interval or {}).get("reference", "")
        if reference:
            kind = "eager-only processes of the same stretches" if reference == EAGER_ONLY else "in-cell eager"
            counts[kind] = counts.get(kind, 0) + 1
    if not counts:
        return ""
    return "; speedups over " + ", ".join(f"{kind} ({n} cells)" for kind, n in counts.items())


def precision_text(results: RunResults) -> str:
    """How the run's float precisions were computed where the hardware decides: strict fp32 or
    TF32 on CUDA, native or emulated bf16 on a CPU."""
    cfg = results.config
    dtypes = cfg.get("dtypes") or ["fp32"]
    parts = []
    if cfg.get("device") == "cuda":
        if "fp32" in dtypes:
            parts.append("fp32 is IEEE fp32 (matmul precision highest, cuDNN TF32 off, ORT use_tf32 0)")
        if "tf32" in dtypes:
            parts.append("tf32: fp32 tensors, TF32 tensor cores for matmuls and convolutions")
    elif "bf16" in dtypes:
        native = sorted(set(results.environment.get("cpu_flags") or []) & {"avx512_bf16", "amx_bf16"})
        parts.append(f"bf16 native ({', '.join(native)})" if native
                     else "bf16 emulated: this CPU has no AVX512-BF16 or AMX instructions")
    return "".join(f"; {part}" for part in parts)


def reference_text(results: RunResults) -> str:
    """The workloads whose float64 numerics reference ran some ops in fp32, where float64
    has no kernel (``info.float64_reference.fp32_ops``, compare.worker.steps.fp32_fallback)."""
    found: dict[str, set[str]] = {}
    for cell in results.cells:
        info = cell.conditions.info if isinstance(cell.conditions.info, dict) else {}
        ops = (info.get("float64_reference") or {}).get("fp32_ops")
        if ops:
            found.setdefault(cell.label, set()).update(ops)
    return "".join(f"; {label}'s float64 reference ran {len(ops)} op(s) in fp32 (no float64 kernel): {', '.join(sorted(ops))}"
                   for label, ops in found.items())


def preset_text(cfg: dict[str, Any]) -> str:
    """What the suite set where the command line did not (compare.harness.run_config.SUITE_DEFAULTS)."""
    preset = dict(cfg.get("preset") or {})
    size = preset.pop("size", None)
    device = f"; --device {cfg.get('device')} set size {size}" if size else ""
    if not preset:
        return device
    said = ", ".join(f"{name.replace('_', ' ')} {','.join(value) if isinstance(value, list) else value}"
                     for name, value in preset.items())
    return f"; --suite {cfg.get('suite')} set {said}{device}"


def scenario_text(cfg: dict[str, Any]) -> str:
    """The scenario with its parameters, as the header states it (its name, when this
    version has no such scenario)."""
    name = cfg.get("scenario") or DEFAULT
    known = scenarios().get(name)
    return known.header(cfg) if known else name


def backend_conditions(results: RunResults) -> str:
    """What the run's backends add to the conditions (TVM: its tuning budget)."""
    options = results.config.get("options", {})
    found = [backend_class(name).run_condition(options) for name in results.config.get("backends", [])]
    return "".join(f"; {text}" for text in found if text)


def pinning_text(results: RunResults) -> str:
    """Which backends bound their threads to single CPUs themselves (each as its own
    default does), as the workers read it from /proc; empty for runs that did not record it."""
    found: dict[str, dict] = {}
    for cell in results.cells:
        seen = (cell.conditions.info or {}).get("thread_pinning") if cell.status == "ok" else None
        if isinstance(seen, dict) and seen.get("pinned", 0) >= found.get(cell.backend, {}).get("pinned", 0):
            found[cell.backend] = seen  # the cell where it pinned the most
    if not found:
        return ""
    pinned = [f"{name} ({p['pinned']} of {p['threads']} threads)" for name, p in found.items() if p.get("pinned")]
    return "; threads pinned by the backend itself: " + (", ".join(pinned) if pinned else "none")


def _probe_text(probe: dict) -> str:
    if "error" in probe:
        return f"failed ({probe['error']})"
    compute, copy = probe["compute_ns_per_element"], probe["copy_gb_s"]
    return (f"compute loop {compute['median']:.3f} ns/element ({compute['p5'] * 100:+.0f}% to "
            f"{compute['p95'] * 100:+.0f}%), memory copy {copy['median']:.1f} GB/s ({copy['p5'] * 100:+.0f}% to "
            f"{copy['p95'] * 100:+.0f}%)")


def noise_line(results: RunResults) -> str | None:
    """The machine's noise from the probes before and after the cells (5th to 95th
    percentile of 0.1 s windows around their median), its drift, and its correlation time."""
    probes = results.experiments.get("noise_probe") or {}
    before, after = probes.get("before"), probes.get("after")
    if not isinstance(before, dict):
        return None
    text = f"Machine noise (0.1 s windows, 5th-95th percentile): before the cells {_probe_text(before)}"
    if isinstance(after, dict):
        text += f"; after {_probe_text(after)}"
        if "error" not in before and "error" not in after:
            drift = [after[k]["median"] / before[k]["median"] - 1 for k in ("compute_ns_per_element", "copy_gb_s")]
            text += f"; change over the run: compute time {drift[0] * 100:+.1f}%, copy bandwidth {drift[1] * 100:+.1f}%"
    if "correlation_s" in before:
        bound = "at least " if before.get("correlation_is_lower_bound") else ""
        text += f"; correlation time {bound}{before['correlation_s']:.1f} s (the bootstrap's block length)"
    return text + "." + busy_text(results, [p for p in (before, after) if isinstance(p, dict)])


# Other processes' cores during a probe beyond which the run was not on a quiet machine: with
# every core taken, a 2-thread OpenMP region waits for its descheduled thread (eager on mlp
# small read 0.059 or 2.6 ms a call, process by process; docs/method.md).
BUSY_CORES = 0.25


def busy_text(results: RunResults, probes: list[dict]) -> str:
    """A warning where other processes kept the machine busy during a probe."""
    others = [p["other_cores"] for p in probes if isinstance(p.get("other_cores"), (int, float))]
    if not others or max(others) < BUSY_CORES:
        return ""
    return (f" **Not a quiet machine:** other processes kept {max(others):.1f} of {results.environment.get('cores', '?')} "
            f"cores busy during a probe; a multi-threaded call can then wait for a descheduled thread, and every "
            f"figure may be off by far more than its interval.")


def reference_line(results: RunResults) -> str | None:
    spread = reference_spread(results)
    if spread is None:
        return None
    beyond = spread["beyond"]
    return (f"Eager reference: the in-cell eager medians are {spread['median'] * 100:+.1f}% (median) from their "
            f"workload's eager-only median; the largest deviation is {spread['largest'] * 100:+.1f}% "
            f"({spread['largest_cell']}); {len(beyond)} of {spread['cells']} cells beyond "
            f"±{REFERENCE_TOLERANCE:.0%}" + (f": {', '.join(beyond)}" if beyond else "") + ".")


def libraries_line(results: RunResults) -> str | None:
    """Which library each backend's GEMMs and convolutions ran in, over the run's cells:
    on AMD CPUs MKL's fp32 GEMMs run far below oneDNN's, which moves GEMM-bound speedups."""
    found: dict[str, dict[str, set[str]]] = {}
    for cell in results.cells:
        for kind, library in (cell.instruments.gemm_library or {}).items():
            if kind in ("gemm", "conv"):
                found.setdefault(cell.backend, {}).setdefault(kind, set()).add(library)
    if not found:
        return None
    parts = [f"{backend} " + ", ".join(f"{kind} {' / '.join(sorted(libs))}" for kind, libs in sorted(kinds.items()))
             for backend, kinds in found.items()]
    return "GEMM and convolution libraries: " + "; ".join(parts) + "."


def decode_failure_markdown(results: RunResults) -> list[str]:
    """The decode cells whose prefill or decode step failed to lower, each with its reproducer."""
    from compare.report.reproducers import decode_failures

    failures = decode_failures(results)
    if not failures:
        return []
    rows = [{"cell": f"{label} / {backend}", "part": f["part"], "error": f["error"],
             "reproducer": f"[{f['path']}]({f['path']})"} for (label, backend), f in failures.items()]
    return ["", "## LLM decode failures, with reproducers", "", pd.DataFrame(rows).to_markdown(index=False), "",
            "Each script builds the decoder as the cell did (transformers' model from its config, seeded "
            "random weights, the explicit-cache wrapper inline) and lowers the failing module with the "
            "backend's own API alone."]


def scenario_sections(results: RunResults) -> list[ReportSection]:
    """Every scenario's report sections that have rows, in the scenarios' order."""
    return [section for each in scenarios().values() for section in each.sections(results) if section.rows]


# What summary.md says of a coverage-only run's figures, in place of LATENCY_NOTE.
COVERAGE_NOTE = ("Coverage only (--coverage-only): each cell was compiled, called once and checked against eager "
                 "and a float64 eager reference; nothing was timed, so there is no latency, speedup or break-even. "
                 "First result s = importing torch and the backend + compile + first call.")
LATENCY_NOTE = (
    "Latency: median per call with half the interquartile range; eager is timed alternately with each "
    "backend in the same worker(s), and the speedup interval is a hierarchical bootstrap 95% CI of the ratio "
    "of medians (worker processes resampled, then blocks of alternated rounds within each; a plain "
    "percentile interval); 'per process' is the range of the processes' own speedups. (noisy): the "
    "interval's half-width exceeds 5% of the speedup. Warm start s = load to first result in the processes "
    "that reused the first one's artifact. Break-even calls = (compile s + all tuning s "
    "behind a tuned backend's log) / (eager latency - backend latency), 'never' when the speedup's interval "
    "reaches 1. First result s = importing torch and the backend + compile + first call.")


def summary_markdown(results: RunResults) -> str:
    frame = summary_frame(results)
    lines = [
        f"# dlcompare run {results.run_id} ({results.state})",
        "",
        f"Environment: {environment_line(results)}",
        "",
        f"Conditions: {conditions_line(results)}",
        "",
        *([noise, ""] if (noise := noise_line(results)) else []),
        *([coverage_md] if (coverage_md := coverage_markdown(results)) else []),
        frame.to_markdown(index=False) if len(frame) else "(no cells)",
        "",
        COVERAGE_NOTE if coverage_only(results) else LATENCY_NOTE,
    ]
    ref = reference_line(results)
    if ref:
        lines += ["", ref]
    libraries = libraries_line(results)
    if libraries:
        lines += ["", libraries]
    geo = geomean_rows(results)
    if geo:
        lines += ["", "## Geometric-mean speedup per backend", "",
                  pd.DataFrame(geo).to_markdown(index=False), "",
                  "Over one common set of workloads per batch and dtype: those where every backend ran and "
                  "agreed with the reference. Cells outside it (failed, unavailable, disagreeing, or another "
                  "backend's failure) are listed."]
    for section in scenario_sections(results):
        lines += ["", f"## {section.title}", "", pd.DataFrame(section.rows).to_markdown(index=False),
                  *(["", section.note] if section.note else [])]
    lines += decode_failure_markdown(results)
    lines += int8_markdown(results)
    lines += explain_markdown(results)
    lines += crosscheck_markdown(results)
    issues = problems(results)
    if issues:
        lines += ["", "## Problems", ""] + [f"- {p}" for p in issues]
    return "\n".join(lines) + "\n"


def coverage_markdown(results: RunResults) -> str:
    """The coverage matrix heads a zoo or --model run's summary (compare/report/coverage.py)."""
    from compare.report import coverage

    return coverage.markdown(results) if coverage.applies(results) else ""


def write_tables(results: RunResults, out_dir: str | Path) -> None:
    out_dir = Path(out_dir)
    atomic_write_text(out_dir / "results.csv", cells_frame(results).to_csv(index=False))
    atomic_write_text(out_dir / "summary.md", summary_markdown(results))
    from compare.report import coverage

    if coverage.applies(results):
        coverage.write_harness_csvs(results, out_dir)


def rich_table(results: RunResults):
    from rich.table import Table

    caption = "\n".join(line for line in (environment_line(results), noise_line(results)) if line)
    table = Table(title=f"dlcompare {results.run_id}: {conditions_line(results)}", caption=caption)
    frame = summary_frame(results)
    for column in frame.columns:
        table.add_column(column, overflow="fold")
    styles = {"ok": "", "unavailable": "dim", "failed": "red", "timeout": "red", "out_of_memory": "red"}
    for cell, row in zip(results.cells, frame.itertuples(index=False)):
        table.add_row(*row, style=styles.get(cell.status, ""))
    return table


def _rich_rows_table(title: str, rows: list[dict[str, Any]]):
    from rich.table import Table

    table = Table(title=title)
    for column in rows[0]:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    return table


def rich_geomean_table(results: RunResults):
    rows = geomean_rows(results)
    return _rich_rows_table("geometric-mean speedup over eager (a common set of cells that ran and agreed)",
                            rows) if rows else None


def rich_extra_tables(results: RunResults) -> list:
    """The tables printed below the cells: geometric means, then each scenario's."""
    geo = rich_geomean_table(results)
    return ([geo] if geo is not None else []) + [
        _rich_rows_table(section.rich_title or section.title.lower(), section.rows)
        for section in scenario_sections(results)]
