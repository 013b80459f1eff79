"""Per-process medians of each eager series in a run: the eager-only reference's K
processes (``--reference-processes K``) and every cell's in-cell eager, each against its
own pooled median, beside the cell's reference deviation. Reads results.json; measures
nothing. Shows how much of a cell's deviation one process's own offset can explain:

    python -m compare --backends ort,iree --workloads norm_residual,conv,mlp --reference-processes 6 --output-dir R
    python scripts/experiments/reference_per_process.py R
"""
import json
import statistics
import sys

from compare.results.sections import flatten


def per_process(latency: dict, groups: list[int] | None) -> list[float]:
    samples, out, start = latency["samples"], [], 0
    for n in groups or [len(latency["samples"])]:
        out.append(statistics.median(samples[start:start + n]))
        start += n
    return out


for path in sys.argv[1:]:
    results = json.load(open(f"{path}/results.json"))
    print(path, "allocator:", results["environment"].get("allocator"))
    for cell in map(flatten, results["cells"]):  # sections (schema 9) or flat
        latency = cell["latency"] if cell["backend"] == "eager" else cell["eager_latency"]
        if not latency:
            continue
        pooled = statistics.median(latency["samples"])
        spread = " ".join(f"{m / pooled - 1:+.1%}" for m in per_process(latency, cell["process_samples"]))
        deviation = cell.get("reference_deviation")
        print(f"  {cell['workload']:18s} {cell['backend']:12s} eager {pooled:8.3f} ms, per process: {spread}"
              + (f"; deviation from the eager-only median {deviation:+.1%}" if deviation is not None else ""))
