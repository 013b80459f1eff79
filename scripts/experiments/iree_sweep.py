"""IREE's CPU options, A/B: one dlcompare run per variant (eager and IREE, 3 processes per
cell, interleaved, IREE's own profile after timing), then one table of speedups over eager
with their 95 % intervals, IREE's latency and its dispatches per call.
Speedups, not milliseconds, are compared across variants: each is measured against the
eager reference of its own run, so the machine's drift between runs cancels.

    python scripts/experiments/iree_sweep.py --output /tmp/iree-sweep [--suite models] [--variants O0,O2-dt]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from compare.results.sections import flatten

# name -> the run's IREE flags. "guide" is IREE's CPU deployment guide (O2 + data tiling).
VARIANTS = {
    "O0": ["--iree-opt-level", "O0", "--iree-data-tiling", "off"],
    "O0-dt": ["--iree-opt-level", "O0", "--iree-data-tiling", "on"],
    "O2": ["--iree-opt-level", "O2", "--iree-data-tiling", "off"],
    "O2-dt": ["--iree-opt-level", "O2", "--iree-data-tiling", "on"],
    "O3-dt": ["--iree-opt-level", "O3", "--iree-data-tiling", "on"],
    "O2-dt-caching": ["--iree-opt-level", "O2", "--iree-data-tiling", "on", "--iree-allocator", "caching"],
    "O2-dt-im2col": ["--iree-opt-level", "O2", "--iree-data-tiling", "on", "--iree-im2col", "on"],
    "O0-im2col": ["--iree-opt-level", "O0", "--iree-data-tiling", "off", "--iree-im2col", "on"],
    # O2 turns on aggressive dispatch fusion: the same, without it
    "O2-nofuse": ["--iree-opt-level", "O2", "--iree-data-tiling", "off",
                  "--iree-flags=--iree-dispatch-creation-enable-aggressive-fusion=false"],
    # data tiling for convolutions too (IREE marks it experimental)
    "O0-dt-conv": ["--iree-opt-level", "O0", "--iree-data-tiling", "on",
                   "--iree-flags=--iree-dispatch-creation-experimental-set-data-tiling-ops=matmul,convolution"],
    "O2-dt-nofuse": ["--iree-opt-level", "O2", "--iree-data-tiling", "on",
                     "--iree-flags=--iree-dispatch-creation-enable-aggressive-fusion=false"],
}


def run_variant(name: str, out: Path, extra: list[str]) -> Path:
    folder = out / name
    if not (folder / "results.json").exists():
        cmd = [sys.executable, "-m", "compare", "--backends", "iree", *VARIANTS[name], "--output-dir", str(folder), "--explain", *extra]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=False)
    return folder


def cells(folder: Path) -> dict[str, dict]:
    data = json.loads((folder / "results.json").read_text())
    return {c["workload"]: c for c in map(flatten, data["cells"]) if c["backend"] == "iree"}  # sections or flat


def figure(cell: dict | None) -> str:
    if not cell or cell.get("status") != "ok":
        return (cell or {}).get("status", "missing")
    lo, hi = cell.get("speedup_ci") or (cell["speedup"], cell["speedup"])
    kernels = (cell.get("profile") or {}).get("kernels")
    dispatches = f", {sum(k['calls'] for k in kernels):.0f} disp." if kernels else ""
    return f"{cell['speedup']:.2f}x [{lo:.2f}-{hi:.2f}] {cell['latency']['median']:.2f} ms{dispatches}"


def table(out: Path, names: list[str]) -> str:
    runs = {name: cells(out / name) for name in names if (out / name / "results.json").exists()}
    workloads = list(dict.fromkeys(w for found in runs.values() for w in found))
    lines = ["| workload | " + " | ".join(runs) + " |", "|---|" + "---|" * len(runs)]
    lines += ["| " + " | ".join([w] + [figure(found.get(w)) for found in runs.values()]) + " |" for w in workloads]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True, help="one folder per variant goes here")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, from: " + ", ".join(VARIANTS))
    parser.add_argument("--table-only", action="store_true", help="print the table of the runs already there")
    args, extra = parser.parse_known_args()  # anything else goes to every run (--suite, --workloads, ...)
    names = [n for n in args.variants.split(",") if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants: {', '.join(unknown)}")
    if not args.table_only:
        for name in names:
            run_variant(name, args.output, extra)
    print(table(args.output, names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
