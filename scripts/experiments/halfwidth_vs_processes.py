"""How wide would the intervals be with more processes per cell, and do they still hold?

Reads two or more interleaved runs of the same plan (results.json, each process with its
stretch of time) and pools their processes per cell, as if one run had made them all:
run A's passes 0-2 and run B's become six stretches. For every subset of k stretches
(k = 2 up to all) it re-derives each speedup and interval from the kept processes' samples
(``compare.results.derived.fill_derived``, the run's own estimator) and prints the median
half-width over the cells, averaged over the subsets of that size. For disjoint pairs of
subsets of equal size it asks what ``compare stability`` asks of two runs: the share of
speedups inside the other's 95 % interval, the share of overlapping intervals, and the
median half-width. Last, each cell's spread between stretches: the standard deviation of
its per-stretch log speedup, the part of the noise that only more stretches average out.
Measures nothing:

    python scripts/experiments/halfwidth_vs_processes.py RUN_A RUN_B [RUN_C ...] [MAX_SUBSETS=20]
"""
import copy
import itertools
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compare.measure.latency import LatencyStats  # noqa: E402
from compare.report.stability import calibration, pairs  # noqa: E402
from compare.results import derived  # noqa: E402
from compare.results.schema import RunResults  # noqa: E402


def split(cell, latency):
    """``latency``'s samples, one list per process of the cell."""
    out, offset = [], 0
    for count in cell.spread.process_samples or []:
        out.append(latency.samples[offset:offset + count])
        offset += count
    return out


def processes(run_name: str, cell) -> list[dict]:
    """The cell's processes, each with its pass (``A0``: run A's first pass) and samples."""
    if cell.latency is None or not cell.spread.processes or not cell.spread.process_samples:
        return []
    lat = split(cell, cell.latency)
    eager = split(cell, cell.eager_latency) if cell.eager_latency is not None else [None] * len(lat)
    return [{"pass": f"{run_name}{str(p['stretch']).split('.')[0]}", "stretch": f"{run_name}{p['stretch']}",
             "summary": p, "latency": a, "eager": b} for p, a, b in zip(cell.spread.processes, lat, eager)]


def rebuilt(cell, kept: list[dict]):
    """The cell as if its processes had been ``kept`` only."""
    out = copy.deepcopy(cell)
    out.latency = LatencyStats.from_ms([x for k in kept for x in k["latency"]], cell.latency.number)
    if cell.eager_latency is not None:
        out.eager_latency = LatencyStats.from_ms([x for k in kept for x in k["eager"]], cell.eager_latency.number)
    out.spread.process_samples = [len(k["latency"]) for k in kept]
    out.spread.processes = [{**k["summary"], "stretch": k["stretch"]} for k in kept]
    out.speedup_ci, out.spread.interval, out.speedup = None, None, None
    return out


def subset_run(base: RunResults, pooled: dict, passes: tuple[str, ...]) -> RunResults:
    run = copy.deepcopy(base)
    cells = []
    for cell, procs in pooled.values():
        kept = [p for p in procs if p["pass"] in passes]
        if kept and cell.status == "ok":
            cells.append(rebuilt(cell, kept))
    run.cells = cells
    derived.fill_derived(run)
    return run


def half_widths(run: RunResults) -> list[float]:
    return [(c.speedup_ci[1] - c.speedup_ci[0]) / 2 / c.speedup for c in run.cells
            if not c.is_reference and c.speedup_ci and c.speedup]


def main(paths: list[str], max_subsets: int) -> None:
    runs = [RunResults.load(p) for p in paths]
    pooled: dict = {}
    for name, run in zip("ABCDEFGH", runs):
        for cell in run.cells:
            key = (cell.workload, cell.backend, cell.batch, cell.dtype)
            entry = pooled.setdefault(key, [cell, []])
            entry[1].extend(processes(name, cell))
    all_passes = sorted({p["pass"] for _, procs in pooled.values() for p in procs})
    print(f"{len(pooled)} cells, passes {', '.join(all_passes)}")
    print("\nk stretches | subsets | median half-width (mean over subsets) | range over subsets")
    for k in range(2, len(all_passes) + 1):
        combos = list(itertools.combinations(all_passes, k))[:max_subsets]
        widths = [statistics.median(half_widths(subset_run(runs[0], pooled, c))) for c in combos]
        print(f"{k:11d} | {len(combos):7d} | {statistics.mean(widths):.1%} | "
              f"{min(widths):.1%}-{max(widths):.1%}")
    print("\ndisjoint pairs of k stretches | pairs | inside the other's interval | overlap | median half-width")
    for k in range(2, len(all_passes) // 2 + 1):
        found = []
        for first in itertools.combinations(all_passes, k):
            rest = [p for p in all_passes if p not in first]
            for second in itertools.combinations(rest, k):
                if first < second:
                    found.append((first, second))
        found = found[:max_subsets]
        figures = [calibration(pairs(subset_run(runs[0], pooled, a), subset_run(runs[0], pooled, b)))
                   for a, b in found]
        mean = {key: statistics.mean(f[key] for f in figures) for key in figures[0]}
        print(f"{k:29d} | {len(found):5d} | " + " | ".join(f"{key} {value:.3f}" for key, value in mean.items()))
    print("\nper cell: sd of the per-stretch log speedup (in-cell pairs), over all passes")
    sds = []
    for (workload, backend, *_), (cell, procs) in pooled.items():
        logs = [math.log(statistics.median(p["eager"]) / statistics.median(p["latency"]))
                for p in procs if p["eager"]]
        if len(logs) > 2 and backend != "eager":
            sds.append(statistics.stdev(logs))
            print(f"  {workload:14s} {backend:14s} {statistics.stdev(logs):6.1%}  "
                  + " ".join(f"{math.exp(v):.2f}" for v in logs))
    if sds:
        sd = statistics.median(sds)
        print(f"median sd {sd:.1%}: a mean over k stretches has a standard error of sd/sqrt(k); "
              + ", ".join(f"k={k}: 1.96 x that = {1.96 * sd / math.sqrt(k):.1%}" for k in (3, 4, 5, 6)))


if __name__ == "__main__":
    numbers = [int(a) for a in sys.argv[1:] if a.isdigit()]
    main([a for a in sys.argv[1:] if not a.isdigit()], numbers[0] if numbers else 20)
