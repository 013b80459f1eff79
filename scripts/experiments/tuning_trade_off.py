"""The auto-tuning trade-off of one or more runs (issue 58): per model and backend, the
speedup over eager with its interval, the compile and tuning minutes, the break-even calls
with and without the tuning, and what the tuner did (TVM: tasks, trials, tasks taken from
the store, tasks left untuned; Inductor's max-autotune: which kernel won each GEMM).

    python scripts/experiments/tuning_trade_off.py RUN_DIR [RUN_DIR ...]

Each run's rows are labelled with the run's TVM budget (``--tvm-tune-minutes``), so that
runs at several budgets read as one table.
"""
from __future__ import annotations

import collections
import sys

import pandas as pd

from compare.api import load


def tuner_note(info: dict) -> str:
    tuning, autotune = info.get("tuning") or {}, info.get("autotune") or {}
    if tuning:
        stored = tuning.get("tasks_from_store") or []
        origins = sorted({r["from"] for r in stored})
        note = (f"{tuning.get('tasks')} tasks, {tuning.get('trials_measured')} trials measured"
                f" ({tuning.get('trials_in_log')} in log), stopped by {tuning.get('stopped_by')}")
        if stored:
            note += f"; {len(stored)} from the store ({', '.join(origins)})"
        if tuning.get("untuned_tasks"):
            note += f"; {len(tuning['untuned_tasks'])} untuned"
        return note
    if autotune.get("gemms"):
        winners = collections.Counter(g["kind"] for g in autotune["gemms"])
        return f"{len(autotune['gemms'])} GEMMs autotuned, won by " + ", ".join(f"{k} {n}" for k, n in winners.items())
    return ""


def rows(run_dir: str) -> list[dict]:
    results = load(run_dir)
    budget = ((results.config or {}).get("options") or {}).get("tvm_tune_minutes")
    out = []
    for cell in results.cells:
        if cell.is_reference:
            continue
        ci = cell.speedup_ci or (None, None)
        info = cell.conditions.info if isinstance(cell.conditions.info, dict) else {}
        out.append({"workload": cell.workload, "backend": cell.backend + (f" @{budget:g} min" if cell.backend == "tvm" else ""),
                    "status": cell.status if cell.status == "ok" else f"{cell.status}: {(cell.error or '')[:60]}",
                    "speedup": cell.speedup, "ci_low": ci[0], "ci_high": ci[1],
                    "compile_min": None if cell.compile_s is None else cell.compile_s / 60,
                    "tuning_min": None if cell.costs.tuning_s is None else cell.costs.tuning_s / 60,
                    "break_even": cell.costs.break_even_calls, "break_even_excl_tuning": cell.costs.break_even_calls_excl_tuning,
                    "numerics_ok": cell.numerics.numerics_ok, "tuner": tuner_note(info)})
    return out


def main(run_dirs: list[str]) -> None:
    if not run_dirs:
        sys.exit(__doc__)
    frame = pd.DataFrame([row for run_dir in run_dirs for row in rows(run_dir)])
    with pd.option_context("display.max_rows", None, "display.max_columns", None, "display.width", 250,
                           "display.max_colwidth", 90, "display.float_format", "{:.3g}".format):
        print(frame.sort_values(["workload", "backend"]).to_string(index=False))


if __name__ == "__main__":
    main(sys.argv[1:])
