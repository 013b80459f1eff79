"""Roofline: this machine's two ceilings and where each cell sits under them.

Ceilings are measured once per run in a worker (``python -m compare.experiments.roofline``)
on the run's thread count, each labelled with its source: memory bandwidth from
a large tensor copy (DRAM: the data far exceeds the caches), compute from large
fp32 matmuls (the best of several sizes). Each workload's FLOPs and minimum bytes are
counted in its worker (``compare.measure.work``).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any


def measure_ceilings(threads: int, seconds: float = 1.0) -> dict[str, Any]:
    import torch

    torch.set_num_threads(threads)
    n_bytes = 256 * 2**20
    src = torch.empty(n_bytes // 4, dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    best_copy = _best_time(lambda: dst.copy_(src), seconds)
    # The compute ceiling is the fastest GEMM on the machine: the best over several sizes
    # (one size alone came out below what oneDNN's convolutions reached on a Zen 5 VM) and
    # over the libraries the backends call (on AMD, MKL's fp32 GEMM runs far below oneDNN's).
    gflops: dict[str, dict[int, float]] = {}
    for library, make in gemm_libraries().items():
        try:
            gflops[library] = {n: 2 * n**3 / _best_time(make(n), seconds) / 1e9 for n in (1024, 2048, 3072)}
        except Exception as exc:  # noqa: BLE001 - a library missing here: the others still count
            print(f"roofline: {library} GEMM not measured: {exc}", file=sys.stderr)
    library, best = max(((lib, n) for lib, sizes in gflops.items() for n in sizes), key=lambda k: gflops[k[0]][k[1]])
    return {
        "peak_gbps": 2 * n_bytes / best_copy / 1e9,  # a copy reads and writes every byte
        "peak_gflops": gflops[library][best],
        "peak_gemm_library": library,
        "gflops_by_library": gflops,
        "gflops_by_matmul_size": gflops[library],
        "memory_source": f"DRAM: best of repeated {n_bytes >> 20} MiB torch copy_ (read + write), "
                         f"{threads} thread(s)",
        "compute_source": f"fp32 GEMM {best}x{best} through {library}, the fastest of {', '.join(gflops)} "
                          f"over sizes 1024, 2048, 3072; {threads} thread(s)",
        "method": f"best of repeated {n_bytes >> 20} MiB tensor copies and fp32 GEMMs of 1024, 2048, 3072 "
                  f"squared in {', '.join(gflops)} (torch {torch.__version__}, {threads} thread(s))",
        "last_level_cache_mb": last_level_cache_mb(),
        "threads": threads,
    }


def gemm_libraries() -> dict[str, Any]:
    """The GEMM libraries the backends call, each as its backend probes it
    (``Backend.gemm_probe``): by name -> a maker of one n x n x n fp32 GEMM call."""
    from adapters import backend_classes

    probes = [cls.gemm_probe() for cls in backend_classes().values()]
    return dict(probe for probe in probes if probe is not None)


def last_level_cache_mb() -> float | None:
    """The largest CPU cache's size (Linux sysfs): data smaller than this can beat the
    DRAM bandwidth ceiling, which is the first thing to check when a cell exceeds it."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip()
        units = {"K": 1 / 1024, "M": 1.0, "G": 1024.0}
        if text and text[-1] in units:
            sizes.append(float(text[:-1]) * units[text[-1]])
    return max(sizes) if sizes else None


def _best_time(fn, seconds: float) -> float:
    fn()
    best = float("inf")
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


if __name__ == "__main__":
    print(json.dumps(measure_ceilings(int(sys.argv[1]) if len(sys.argv) > 1 else 1)))
