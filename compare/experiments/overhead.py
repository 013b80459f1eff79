"""Benchmark: does the harness's own cost show in its figures?

For callables of about 0.1, 1 and 10 ms, compare the runner's median latency
(``compare.measure.timing.time_alternating``) with a bare ``perf_counter`` loop over
the same callable (and, for reference, the median of single timed calls). The two are taken alternately,
several times, on one thread. Prints a table; ``python -m compare overhead``.
"""
from __future__ import annotations

import statistics
import time

from compare.measure.timing import Timed, TimingConfig, time_alternating


def _bare_loop_ms(fn, arg, number: int, seconds: float) -> float:
    """Median over samples of a bare ``for`` loop of ``number`` calls between two clock reads."""
    samples = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(samples) < 5:
        start = time.perf_counter()
        for _ in range(number):
            fn(arg)
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples) * 1e3


def _per_call_median_ms(fn, arg, seconds: float) -> float:
    """Median of single calls, each between two clock reads (the naive measurement)."""
    times = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < 5:
        start = time.perf_counter()
        fn(arg)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _workloads(threads: int):
    import torch

    torch.set_num_threads(threads)

    def matmul_of(n):
        a = torch.randn(n, n)
        return lambda x: torch.mm(x, a), torch.randn(n, n)

    # Sizes picked for roughly 0.1 / 1 / 10 ms on one core of a current x86 server.
    return {f"matmul {n}x{n}": matmul_of(n) for n in (160, 360, 780)}


def measure(repeats: int = 15, threads: int = 1) -> list[dict]:
    rows = []
    noop = lambda: None  # noqa: E731  CPU: nothing to synchronize
    config = TimingConfig(warmup_s=0.05, budget_s=0.3, min_samples=10, target_rel_se=0.0)
    for name, (fn, arg) in _workloads(threads).items():
        harness, bare, per_call = [], [], []
        numbers = []

        def run_harness():
            stats = time_alternating([Timed(fn, arg, noop)], config)[0]
            harness.append(stats.median)
            numbers.append(stats.number)

        for r in range(repeats):
            steps = [
                run_harness,
                lambda: bare.append(_bare_loop_ms(fn, arg, numbers[-1] if numbers else 1, 0.3)),
                lambda: per_call.append(_per_call_median_ms(fn, arg, 0.3)),
            ]
            for step in (steps if r % 2 == 0 else steps[::-1]):
                step()
        h, b, p = statistics.median(harness), statistics.median(bare), statistics.median(per_call)
        rows.append({"callable": name, "harness_ms": h, "bare_ms": b, "per_call_ms": p,
                     "diff_pct": (h / b - 1) * 100, "per_call_diff_pct": (h / p - 1) * 100})
    return rows


def main(repeats: int = 15) -> int:
    from rich.console import Console
    from rich.table import Table

    rows = measure(repeats)
    table = Table(title=f"harness vs bare perf_counter loop (1 thread, median of {repeats} alternating repeats)")
    for col in ("callable", "harness median ms", "bare loop median ms", "harness vs bare",
                "per-call median ms", "harness vs per-call"):
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(row["callable"], f"{row['harness_ms']:.4f}", f"{row['bare_ms']:.4f}", f"{row['diff_pct']:+.2f}%",
                      f"{row['per_call_ms']:.4f}", f"{row['per_call_diff_pct']:+.2f}%")
    console = Console()
    console.print(table)
    console.print("bare loop: the same number of calls per sample as the harness, between two perf_counter reads; "
                  "per-call: one call between two reads (medians of single calls ignore rare slow calls "
                  "that a loop's mean includes).")
    return 0
