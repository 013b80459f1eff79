"""Which speedup estimator holds between two back-to-back runs of one command?

Reads two interleaved runs (results.json with each process's stretch) and re-derives every
speedup and interval from their samples three ways (``compare.results.derived.PAIRING``):
against the eager alternated with the backend in its own worker ("in-cell"), against the
eager-only processes of the cell's stretches ("eager-only"), and the default, "guarded":
in-cell unless that eager sat beyond noise from the eager-only processes. For each, prints
what ``compare stability`` prints: the share of speedups inside the other run's 95 %
interval, the share of intervals that overlap, and the median half-width; and how many
cells the guard sent to the eager-only processes. Measures nothing:

    python scripts/experiments/estimators_back_to_back.py RUN_A RUN_B
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compare.report.stability import calibration, pairs  # noqa: E402
from compare.results import derived  # noqa: E402
from compare.results.schema import RunResults  # noqa: E402


def load(path: str) -> RunResults:
    results = RunResults.load(path)
    for cell in results.cells:
        cell.speedup_ci = None  # derived again under the estimator being tried
    return results


def main(a: str, b: str) -> None:
    for pairing in ("in-cell", "eager-only", "guarded"):
        derived.PAIRING = pairing
        found = pairs(load(a), load(b))
        figures = {k: round(v, 3) for k, v in calibration(found).items()}
        runs = [load(a), load(b)]
        for run in runs:
            derived.fill_derived(run)
        moved = sum(1 for run in runs for c in run.cells
                    if (c.spread.interval or {}).get("reference") == derived.EAGER_ONLY)
        print(f"{pairing}: {figures}; cells over the eager-only processes: {moved} of "
              f"{sum(1 for run in runs for c in run.cells if c.spread.interval)}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
