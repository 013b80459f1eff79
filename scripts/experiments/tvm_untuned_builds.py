"""Untuned TVM builds of the paper's workloads, measured three ways per workload: naked
(no schedule), with default schedules, and with default schedules plus vectorizable math.
Prints latency, max error against float64, and the libm calls left in the x86 assembly.

    TVM_NUM_THREADS=2 python scripts/experiments/tvm_untuned_builds.py [SIZE=default] [WORKLOAD,...]

Evidence for docs/tvm-tuning.md (default schedules, vector math); it measures, so run it
on an idle machine. Eager runs here without the workers' allocator setting.
"""
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import tvm  # noqa: E402
from tvm import relax  # noqa: E402
from tvm.relax.frontend.torch import from_exported_program  # noqa: E402

from adapters.tvm.backend import _TvmBase  # noqa: E402
from adapters.tvm.fast_math import math_passes  # noqa: E402
from adapters.tvm.schedules import default_cpu_schedules, unscheduled  # noqa: E402
from workloads import build_model, builtin_workloads, make_inputs  # noqa: E402

LIBM = re.compile(r"call\w*\s+\*?((?:sin|cos|sincos|exp|log|tanh|erf|pow)f?)\b")


def build(module, inputs, target, schedules: bool, fast: bool):
    mod = from_exported_program(torch.export.export(module, tuple(inputs)), unwrap_unit_return_tuple=True)
    with target:
        mod = tvm.transform.Sequential([*math_passes(fast), relax.transform.DecomposeOpsForInference(),
                                        relax.pipeline.zero_pipeline()])(mod)
    naked = len(unscheduled(mod))
    if schedules:
        mod = default_cpu_schedules(mod, target)
    executable = tvm.compile(mod, target=target)
    asm = "\n".join(m.inspect_source("asm") for m in executable.mod._collect_dso_modules() if m.kind == "llvm")
    return relax.VirtualMachine(executable, tvm.cpu())["main"], naked, sorted(set(LIBM.findall(asm)))


def median_ms(fn, calls: int = 7) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def main(size: str = "default", names: str = "elementwise_chain,norm_residual,conv,mlp,attention") -> None:
    target, mcpu = _TvmBase.host_target(2)
    print(f"target llvm -mcpu={mcpu}, size {size}")
    for name in names.split(","):
        workload = builtin_workloads()[name]
        module, inputs = build_model(workload, size).eval(), make_inputs(workload.input_specs(size))
        with torch.no_grad():
            eager_ms = median_ms(lambda: module(*inputs))
            ref64 = module.double()(*[x.double() for x in inputs]).numpy()
            module.float()
        args = [tvm.runtime.tensor(x.numpy()) for x in inputs]
        for label, schedules, fast in (("naked", False, False), ("schedules", True, False),
                                       ("schedules+fast math", True, True)):
            fn, naked, libm = build(module, inputs, target, schedules, fast)
            out = fn(*args)
            err = float(np.abs((out.numpy() if hasattr(out, "numpy") else out[0].numpy()) - ref64).max())
            print(f"{name:18s} {label:20s} {median_ms(lambda: fn(*args)):9.2f} ms  err64 {err:.1e}  "
                  f"kernels without schedule before {naked}  libm calls {libm or '-'}  (eager {eager_ms:.2f} ms)")


if __name__ == "__main__":
    main(*sys.argv[1:])
