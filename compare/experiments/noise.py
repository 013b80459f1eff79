"""``python -m compare noise``: how steady is this machine's speed, second by second?

Times one fixed, single-threaded, cache-resident kernel (a multiply-add over a small
numpy array: no memory traffic, no threads, no allocation) in back-to-back windows of
0.1 s for a while, and prints how far the windows and the per-second medians stray
from the overall median. On a dedicated machine they stay within a few percent; on a
shared VM whose host changes the clock with its load they do not, and then only
figures timed alternately (as each cell's eager/backend pairs are) or interleaved (as
the cells of a workload are) can be compared. A benchmark of the machine, not of a
backend: nothing is written.
"""
from __future__ import annotations

import statistics
import time

import numpy as np

WINDOW_S = 0.1


def probe(seconds: float, elements: int = 4096) -> list[tuple[float, float]]:
    """(start offset s, ns per element) for each window."""
    a = np.linspace(0.0, 1.0, elements, dtype=np.float32)
    b = np.zeros_like(a)
    out = []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        start = time.perf_counter()
        out.append((start - t0, compute_window(a, b)))
    return out


def compute_window(a: np.ndarray, b: np.ndarray) -> float:
    """ns per element of the fixed multiply-add over ``WINDOW_S`` (``b`` is its scratch)."""
    start, reps = time.perf_counter(), 0
    while time.perf_counter() - start < WINDOW_S:
        np.multiply(b, 0.999, out=b)
        np.add(b, a, out=b)
        reps += 1
    return (time.perf_counter() - start) / (reps * a.size) * 1e9


def summary(windows: list[tuple[float, float]]) -> dict[str, float | list[float]]:
    values = sorted(v for _, v in windows)
    med = statistics.median(values)
    per_second: dict[int, list[float]] = {}
    for offset, value in windows:
        per_second.setdefault(int(offset), []).append(value)
    seconds = [statistics.median(v) / med - 1 for _, v in sorted(per_second.items())]
    return {"windows": len(values), "median_ns": med,
            "p5": values[len(values) // 20] / med - 1, "p95": values[-(len(values) // 20) - 1] / med - 1,
            "fastest_second": min(seconds), "slowest_second": max(seconds), "per_second": seconds}


def main(seconds: float) -> int:
    result = summary(probe(seconds))
    print(f"{result['windows']} windows of {WINDOW_S:g} s; a single-threaded cache-resident kernel, "
          f"median {result['median_ns']:.3f} ns per element")
    print(f"windows: 5th percentile {result['p5']:+.1%}, 95th {result['p95']:+.1%} from the median "
          "(negative = faster)")
    print(f"per-second medians: fastest {result['fastest_second']:+.1%}, slowest {result['slowest_second']:+.1%}")
    print("per second: " + " ".join(f"{x:+.0%}" for x in result["per_second"]))
    return 0


# ----------------------------------------------------------------------------- the run's probe
COPY_BYTES = 64 * 2**20  # beyond the caches: the copy measures memory bandwidth


def _correlation_s(values: list[float], lag_s: float) -> tuple[float, bool]:
    """Seconds until the series' autocorrelation first falls below 1/e (at least one lag),
    and whether it never did within half the series (then the figure is a lower bound)."""
    x = np.asarray(values, dtype=float)
    x = x - x.mean()
    denominator = float((x * x).sum())
    if len(x) < 4 or denominator <= 0:
        return lag_s, False
    for k in range(1, len(x) // 2 + 1):
        if float((x[:-k] * x[k:]).sum()) / denominator < 1 / np.e:
            return k * lag_s, False
    return (len(x) // 2) * lag_s, True


def _spread(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=float)
    med = float(np.median(arr))
    p5, p95 = np.percentile(arr, [5, 95])
    return {"median": med, "p5": float(p5 / med - 1), "p95": float(p95 / med - 1)}


def busy_cpu_s() -> float:
    """CPU seconds every process on the machine has used so far (all but idle and iowait)."""
    import psutil

    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def machine_probe(seconds: float) -> dict[str, object]:
    """The machine's noise as the run's header shows it: windows of ``WINDOW_S`` taking
    turns between a fixed compute loop (ns per element, single-threaded, cache-resident)
    and a memory copy (GB/s, read + write, beyond the caches), for ``seconds`` in all; and
    how many cores other processes kept busy meanwhile (``other_cores``: the machine's busy
    CPU seconds less the probe's own, over the wall time)."""
    busy0, own0 = busy_cpu_s(), time.process_time()
    a = np.linspace(0.0, 1.0, 4096, dtype=np.float32)
    b = np.zeros_like(a)
    src, dst = np.ones(COPY_BYTES // 8), np.empty(COPY_BYTES // 8)
    compute, copy = [], []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds or len(copy) < 4:
        compute.append(compute_window(a, b))
        start, reps = time.perf_counter(), 0
        while time.perf_counter() - start < WINDOW_S:
            np.copyto(dst, src)
            reps += 1
        copy.append(2 * COPY_BYTES * reps / (time.perf_counter() - start) / 1e9)
    corr = [_correlation_s(series, 2 * WINDOW_S) for series in (compute, copy)]
    wall = time.perf_counter() - t0
    others = max(0.0, (busy_cpu_s() - busy0) - (time.process_time() - own0)) / wall
    return {"seconds": wall, "window_s": WINDOW_S, "windows": len(compute) + len(copy), "other_cores": others,
            "compute_ns_per_element": _spread(compute), "copy_gb_s": _spread(copy),
            "correlation_s": max(c for c, _ in corr), "correlation_is_lower_bound": any(bound for _, bound in corr)}


if __name__ == "__main__":  # the runner's probe: python -m compare.experiments.noise SECONDS [CPU,CPU...]
    import json
    import os
    import sys

    if len(sys.argv) > 2:
        os.sched_setaffinity(0, [int(c) for c in sys.argv[2].split(",")])
    print(json.dumps(machine_probe(float(sys.argv[1]))))
