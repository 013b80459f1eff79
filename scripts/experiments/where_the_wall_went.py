"""Where a run's wall time went: each worker process's seconds by phase (the parent's clock
between the worker's phase events, ``phase_s``), summed by pass and by backend.

    python scripts/experiments/where_the_wall_went.py RUN_DIR

A process's "timing" phase includes the turns it waited while the other workers of its
group sampled, so the phases of one group's workers overlap in time; the table of passes
therefore also gives each stretch's own span (first spawn to last exit), which is what the
run's wall is made of.
"""
from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import pandas as pd

# The phases a backend's compile reports under its own names (export, lower, session...) are
# summed as "compile"; the others keep the worker's names.
WORKER_PHASES = {"start", "setup", "import", "waiting to compile", "numerics", "timing", "after timing"}


def processes(results: dict) -> list[dict]:
    """One row per worker process: its cell, pass, stretch, wall and phases."""
    rows = []
    for cell in results["cells"]:
        procs = (cell.get("spread") or {}).get("processes") or (cell.get("costs") or {}).get("processes") or []
        for proc in procs:
            phases: dict[str, float] = collections.Counter()
            for phase, seconds in (proc.get("phase_s") or {}).items():
                phases[phase if phase in WORKER_PHASES else "compile"] += seconds
            stretch = proc.get("stretch") or "0.0"
            rows.append({"workload": cell["workload"], "backend": cell["backend"], "pass": int(stretch.split(".")[0]),
                         "stretch": stretch, "started_at": proc.get("started_at"), "wall_s": proc.get("wall_s"),
                         **phases})
    return rows


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    frame = pd.DataFrame(processes(json.loads((Path(argv[0]) / "results.json").read_text()))).fillna(0.0)
    if frame.empty:
        print("no process records with phases in this run", file=sys.stderr)
        return 1
    frame["ended_at"] = frame["started_at"] + frame["wall_s"]
    spans = frame.groupby(["workload", "stretch"]).agg(start=("started_at", "min"), end=("ended_at", "max"),
                                                        workers=("backend", "count"))
    spans["span_s"] = spans["end"] - spans["start"]
    by_pass = spans.groupby(level=["workload"]).apply(
        lambda g: g.groupby(g.index.get_level_values("stretch").str.split(".").str[0])["span_s"].sum())
    phases = [c for c in ["start", "setup", "import", "waiting to compile", "compile", "numerics", "timing",
                          "after timing"] if c in frame]
    print("Each stretch of interleaved time, first spawn to last exit (s):")
    print(spans[["workers", "span_s"]].round(1).to_string())
    print("\nBy pass (s):")
    print(by_pass.round(1).to_string())
    print("\nWorker seconds by phase, per pass, summed over the processes (s):")
    print(frame.groupby("pass")[phases + ["wall_s"]].sum().round(1).to_string())
    print("\nWorker seconds by phase, per backend, summed over passes (s):")
    print(frame.groupby("backend")[phases + ["wall_s"]].sum().round(1).to_string())
    print(f"\nrun span: {frame['ended_at'].max() - frame['started_at'].min():.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
