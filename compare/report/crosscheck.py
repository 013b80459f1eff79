"""``python -m compare crosscheck RUN_DIR``: each cell's latency beside the one its
backend's own benchmark tool measured on the same artifact, inputs and threads
(``--crosscheck``: iree-benchmark-module, benchmark_app, TVM's time_evaluator, ORT's
session profiler, torch.utils.benchmark.Timer). A cell further than
``CROSSCHECK_TOLERANCE`` from its tool is flagged. Reads results only; measures nothing.
"""
from __future__ import annotations

import pandas as pd

from compare.results.derived import CROSSCHECK_TOLERANCE, fill_derived
from compare.results.schema import RunResults


def crosscheck_frame(results: RunResults) -> pd.DataFrame:
    rows = []
    for cell in results.cells:
        check = cell.instruments.crosscheck
        if cell.status != "ok" or not check:
            continue
        if "ratio" not in check:
            rows.append({"workload": cell.label, "backend": cell.backend, "tool": "-", "tool ms": None,
                         "dlcompare ms": cell.latency_median_ms, "tool / dlcompare": check.get("unavailable")})
            continue
        flag = " !" if check.get("flagged") else ""
        rows.append({"workload": cell.label, "backend": cell.backend, "tool": check["tool"],
                     "tool ms": round(check["median_ms"], 4), "dlcompare ms": cell.latency_median_ms,
                     "tool / dlcompare": f"{check['ratio']:.2f}{flag}"})
    return pd.DataFrame(rows)


def crosscheck_markdown(results: RunResults) -> list[str]:
    """summary.md's section, when the run was made with --crosscheck."""
    frame = crosscheck_frame(results)
    if frame.empty:
        return []
    return ["", "## Cross-check with each backend's own tool", "",
            "The same artifact, inputs and threads re-timed after timing by the tool its engineers use; the "
            "ratio is the median over the cell's processes of the tool's median over that process's own "
            f"(! beyond ±{CROSSCHECK_TOLERANCE:.0%}).", "", frame.fillna("-").to_markdown(index=False)]


def run(args, console) -> int:
    results = RunResults.load(args.run)
    fill_derived(results)
    frame = crosscheck_frame(results)
    if frame.empty:
        console.print(f"{args.run}: no cross-checks in this run; run it with --crosscheck")
        return 1
    console.print(f"[bold]Cross-check[/bold] (run {results.run_id}; each backend's own benchmark tool)")
    console.print(frame.fillna("-").to_markdown(index=False), highlight=False)
    flagged = int(frame["tool / dlcompare"].astype(str).str.endswith("!").sum())
    return 0 if flagged == 0 else 3
