"""Roofline: this machine's two ceilings and where each cell sits under them.

Ceilings are measured once per run in a worker (``python -m compare.roofline``):
memory bandwidth from a large tensor copy, compute from a large fp32 matmul, on
the run's thread count. Per workload, FLOPs come from torch's flop counter
(matmul/conv/attention; pointwise ops count 0, so those cells are judged on
bytes) and the minimum bytes are inputs + weights + outputs, each moved once.
"""
from __future__ import annotations

import json
import sys
import time
from typing import Any, Sequence


def tensor_bytes(tensors: Sequence[Any]) -> int:
    return int(sum(t.numel() * t.element_size() for t in tensors if hasattr(t, "numel")))


def count_work(model, inputs: Sequence[Any], outputs: Sequence[Any]) -> dict[str, Any]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(*inputs)
    weights = list(model.parameters()) + list(model.buffers())
    parts = {"inputs": tensor_bytes(inputs), "weights": tensor_bytes(weights), "outputs": tensor_bytes(outputs)}
    return {"flops": int(counter.get_total_flops()), "min_bytes": sum(parts.values()), "bytes_by_part": parts}


def place(work: dict[str, Any] | None, latency_ms: float | None, ceilings: dict[str, Any] | None) -> dict[str, Any] | None:
    """Achieved rates and the fraction of the roofline bound reached (1.0 = at the roof)."""
    if not work or not latency_ms or not ceilings:
        return None
    seconds = latency_ms / 1e3
    peak_flops = ceilings["peak_gflops"] * 1e9
    peak_bw = ceilings["peak_gbps"] * 1e9
    flops, nbytes = work["flops"], work["min_bytes"]
    bound_s = max(flops / peak_flops, nbytes / peak_bw)
    return {
        "achieved_gflops": flops / seconds / 1e9,
        "achieved_gbps": nbytes / seconds / 1e9,
        "arithmetic_intensity": flops / nbytes if nbytes else None,
        "bound": "compute" if flops / peak_flops >= nbytes / peak_bw else "memory",
        "bound_ms": bound_s * 1e3,
        "fraction_of_roofline": bound_s / seconds,
    }


def measure_ceilings(threads: int, seconds: float = 1.0) -> dict[str, Any]:
    import torch

    torch.set_num_threads(threads)
    n_bytes = 256 * 2**20
    src = torch.empty(n_bytes // 4, dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    best_copy = _best_time(lambda: dst.copy_(src), seconds)
    # The compute ceiling is the best over several matmul sizes: one size alone (2048)
    # came out below what oneDNN's convolutions reached on a Zen 5 VM.
    gflops = {}
    for n in (1024, 2048, 3072):
        a, b, out = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
        gflops[n] = 2 * n**3 / _best_time(lambda: torch.mm(a, b, out=out), seconds) / 1e9
    return {
        "peak_gbps": 2 * n_bytes / best_copy / 1e9,  # a copy reads and writes every byte
        "peak_gflops": max(gflops.values()),
        "gflops_by_matmul_size": gflops,
        "method": f"best of repeated {n_bytes >> 20} MiB tensor copies and fp32 matmuls of "
                  f"{', '.join(str(n) for n in gflops)} squared (torch {torch.__version__}, {threads} thread(s))",
        "threads": threads,
    }


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
