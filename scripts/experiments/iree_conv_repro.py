"""IREE's convolutions, reproduced with IREE's own tools and nothing of dlcompare's harness:
the survey's conv graph (Conv2d 3x3 + BatchNorm + ReLU blocks, eval mode) exported once
with iree-turbine, compiled by the ``iree-compile`` CLI under each flag set (so flag lists
that iree-turbine's parser refuses, such as the experimental convolution data tiling,
reach the compiler), timed by ``iree-benchmark-module`` and, alternated with it, the same
module in eager PyTorch (oneDNN's convolutions) under ``torch.utils.benchmark``:

    python scripts/experiments/iree_conv_repro.py --output /tmp/iree-conv [--size default] [--rounds 3]

Prints per variant: IREE's median, eager's median over the same rounds, the ratio
(speedup over eager), the dispatch count, and what the dumped executable sources show of
the convolution's lowering (mmt4d ukernels, im2col, the linalg conv op left).
Run it on an idle machine with OMP_NUM_THREADS equal to --threads.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from adapters.profiling import tool_path  # noqa: E402  (the venv's IREE tools, else PATH's)

BASE = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
        "--iree-llvmcpu-target-cpu=host"]
CONV_TILING = [f"--iree-dispatch-creation-experimental-set-data-tiling-ops={op}"
               for op in ("matmul", "scaled_matmul", "convolution")]
# name -> flags after BASE; dlcompare's default is "O0-dt".
VARIANTS = {
    "O0": ["--iree-opt-level=O0"],
    "O0-dt": ["--iree-opt-level=O0", "--iree-opt-data-tiling=true"],
    "O2-dt": ["--iree-opt-level=O2", "--iree-opt-data-tiling=true"],
    "O3-dt": ["--iree-opt-level=O3", "--iree-opt-data-tiling=true"],
    "O2-dt-im2col": ["--iree-opt-level=O2", "--iree-opt-data-tiling=true", "--iree-global-opt-use-im2col-for-convs"],
    # IREE 3.13 marks data tiling of convolutions experimental; its flag is a list given once per value
    "O0-dt-conv": ["--iree-opt-level=O0", "--iree-opt-data-tiling=true", *CONV_TILING],
    "O2-dt-conv": ["--iree-opt-level=O2", "--iree-opt-data-tiling=true", *CONV_TILING],
    "O2-dt-conv-im2col": ["--iree-opt-level=O2", "--iree-opt-data-tiling=true", *CONV_TILING,
                          "--iree-global-opt-use-im2col-for-convs"],
}
# what the dispatches' sources show of the lowering: linalg ops, and IREE's packed forms
OPS = r"linalg\.(?!yield|index\b|memoized)[a-z_0-9]+|iree_linalg_ext\.[a-z_0-9]+|iree_codegen\.ukernel[a-z_.0-9]*"


def export(size: str, folder: Path):
    """The conv module, its input, and its MLIR as iree-turbine exports it for dlcompare."""
    import torch
    from iree.turbine import aot

    from workloads import build_model, builtin_workloads, make_inputs

    workload = builtin_workloads()["conv"]
    module = build_model(workload, size)
    inputs = make_inputs(workload.input_specs(size))
    mlir = folder / "conv.mlir"
    if not mlir.exists():
        aot.export(module, args=tuple(inputs)).save_mlir(str(mlir))
    import numpy as np

    np.save(folder / "input.npy", inputs[0].numpy())
    return module, inputs, mlir, torch


def compile_variant(name: str, mlir: Path, folder: Path) -> tuple[Path | None, str]:
    vmfb, sources = folder / f"{name}.vmfb", folder / f"{name}-sources"
    if vmfb.exists():
        return vmfb, ""
    proc = subprocess.run([tool_path("iree-compile"), str(mlir), *BASE, *VARIANTS[name], "-o", str(vmfb),
                           f"--iree-hal-dump-executable-sources-to={sources}"], capture_output=True, text=True)
    if proc.returncode != 0:
        return None, (proc.stderr.strip().splitlines() or ["?"])[-1][:200]
    return vmfb, ""


def lowering(name: str, folder: Path) -> str:
    """Dispatch count and the ops in the dumped executable sources (linalg.generic with
    seven loops is a direct convolution; mmt4d and pack are data tiling's)."""
    from collections import Counter

    files = sorted((folder / f"{name}-sources").glob("*.mlir"))
    ops = Counter(re.findall(OPS, "\n".join(f.read_text() for f in files)))
    return f"{len(files)} dispatches: " + ", ".join(f"{op} x{n}" for op, n in ops.most_common())


def iree_ms(vmfb: Path, folder: Path, threads: int, seconds: float) -> float:
    proc = subprocess.run([tool_path("iree-benchmark-module"), f"--module={vmfb}", "--function=main", "--device=local-task",
                           f"--task_topology_group_count={threads}", f"--input=@{folder / 'input.npy'}",
                           "--benchmark_format=json", "--benchmark_repetitions=3",
                           f"--benchmark_min_time={seconds / 3:.3f}s"], capture_output=True, text=True, check=True)
    rows = json.loads(proc.stdout)["benchmarks"]
    median = next(r for r in rows if r.get("aggregate_name") == "median")
    return float(median["real_time"]) * {"ns": 1e-6, "us": 1e-3, "ms": 1.0}[median["time_unit"]]


def eager_ms(module, inputs, torch, threads: int, seconds: float) -> float:
    from torch.utils import benchmark

    # grad mode is per thread: set where the timer runs its statement, as dlcompare's eager runs
    timer = benchmark.Timer("m(x)", setup="torch.set_grad_enabled(False)", globals={"m": module, "x": inputs[0]},
                            num_threads=threads)
    return timer.blocked_autorange(min_run_time=seconds).median * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--size", default="default")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="alternations of every variant with eager")
    parser.add_argument("--seconds", type=float, default=2.0, help="per timing, each tool")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    args.output.mkdir(parents=True, exist_ok=True)
    module, inputs, mlir, torch = export(args.size, args.output)
    torch.set_num_threads(args.threads)
    built, failed = {}, {}
    for name in args.variants.split(","):
        vmfb, error = compile_variant(name, mlir, args.output)
        if vmfb:
            built[name] = vmfb
        else:
            failed[name] = error
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in built}
    for _ in range(args.rounds):  # each variant beside an eager timing taken just before it
        for name, vmfb in built.items():
            times[name].append((eager_ms(module, inputs, torch, args.threads, args.seconds),
                                iree_ms(vmfb, args.output, args.threads, args.seconds)))
    print(f"| variant | IREE ms (median of {args.rounds}) | eager ms | speedup (range) | lowering |")
    print("|---|---|---|---|---|")
    for name, pairs in times.items():
        ratios = [e / i for e, i in pairs]
        print(f"| {name} | {statistics.median(i for _, i in pairs):.2f} | {statistics.median(e for e, _ in pairs):.2f} "
              f"| {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) | {lowering(name, args.output)} |")
    for name, error in failed.items():
        print(f"| {name} | compile failed: {error} | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
