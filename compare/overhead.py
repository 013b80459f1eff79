"""Benchmark: does the harness's own cost show in its figures?

For callables of about 0.1, 1 and 10 ms, compare the runner's median latency
(``compare.measure.time_alternating``) with the median of a bare loop that
times each call with ``time.perf_counter``. The two are taken alternately,
several times, on one thread. Prints a table; ``python -m compare overhead``.
"""
from __future__ import annotations

import statistics
import time

from .measure import Timed, TimingConfig, time_alternating


def _bare_median_ms(fn, arg, seconds: float) -> float:
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
    return {f"matmul {n}x{n}": matmul_of(n) for n in (96, 224, 480)}


def measure(repeats: int = 15, threads: int = 1) -> list[dict]:
    rows = []
    noop = lambda: None  # noqa: E731  CPU: nothing to synchronize
    config = TimingConfig(warmup_s=0.05, budget_s=0.3, min_samples=10, target_rel_se=0.0)
    for name, (fn, arg) in _workloads(threads).items():
        harness, bare = [], []
        for r in range(repeats):
            pair = [
                lambda: harness.append(time_alternating([Timed(fn, arg, noop)], config)[0].median),
                lambda: bare.append(_bare_median_ms(fn, arg, 0.3)),
            ]
            for step in (pair if r % 2 == 0 else pair[::-1]):
                step()
        h, b = statistics.median(harness), statistics.median(bare)
        rows.append({"callable": name, "harness_ms": h, "bare_ms": b, "diff_pct": (h / b - 1) * 100})
    return rows


def main(repeats: int = 15) -> int:
    from rich.console import Console
    from rich.table import Table

    rows = measure(repeats)
    table = Table(title=f"harness vs bare perf_counter loop (1 thread, median of {repeats} alternating repeats)")
    for col in ("callable", "harness median ms", "bare loop median ms", "difference"):
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(row["callable"], f"{row['harness_ms']:.4f}", f"{row['bare_ms']:.4f}", f"{row['diff_pct']:+.2f}%")
    Console().print(table)
    return 0
