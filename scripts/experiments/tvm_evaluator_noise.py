"""How noisy is one MetaSchedule measurement (number=1, repeat=1, min_repeat_ms=X)?

Builds small default-scheduled modules (kernel-sized calls, as MetaSchedule measures
them) and takes 40 measurements per setting with TVM's own time_evaluator; prints the
median, the coefficient of variation and the p90/p10 ratio of single measurements, and
the wall time one measurement costs.

    TVM_NUM_THREADS=2 python scripts/experiments/tvm_evaluator_noise.py

Evidence for the evaluator setting in docs/tvm-tuning.md; run it on an idle machine.
"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import numpy as np
import torch
import tvm
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program

from adapters.tvm.backend import _TvmBase
from adapters.tvm.schedules import default_cpu_schedules
from workloads import build_model, builtin_workloads, make_inputs

target, _ = _TvmBase.host_target(2)
for name, size in (("mlp", "small"), ("norm_residual", "small"), ("conv", "small")):
    w = builtin_workloads()[name]; m = build_model(w, size).eval(); x = make_inputs(w.input_specs(size))
    mod = from_exported_program(torch.export.export(m, tuple(x)), unwrap_unit_return_tuple=True)
    with target:
        mod = relax.pipeline.zero_pipeline()(mod)
    vm = relax.VirtualMachine(tvm.compile(default_cpu_schedules(mod, target), target=target), tvm.cpu())
    args = [tvm.runtime.tensor(a.numpy()) for a in x]
    vm.set_input("main", *args)
    out = []
    for ms in (10, 40, 100):
        f = vm.time_evaluator("invoke_stateful", tvm.cpu(), number=1, repeat=40, min_repeat_ms=ms)
        t0 = time.perf_counter(); r = np.array(f("main").results) * 1e3; wall = time.perf_counter() - t0
        cv = r.std() / r.mean()
        out.append(f"min_repeat_ms={ms}: median {np.median(r):.4f} ms, CV {cv:.1%}, p90/p10 {np.percentile(r,90)/np.percentile(r,10):.3f}, {wall/40:.3f} s per measurement")
    print(name, size, "|", " | ".join(out))
