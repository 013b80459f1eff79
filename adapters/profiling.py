"""Kernel-level profiles, read from each backend's own instrument.

A profile says what a compiled model actually runs per call: its kernels (or
dispatches, or graph nodes), how often, for how long, of which kind, and which
source ops went into each where the backend says so. Profiling happens after
timing, in the same worker, and never inside a timed sample.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

CATEGORIES = ("matmul/conv", "reduction/norm", "pointwise", "data movement", "runtime overhead")

# Checked in this order: a fused kernel that holds a matmul is a matmul kernel, one that
# holds a reduction a reduction kernel; what is left is pointwise.
_CATEGORY_PATTERNS = (
    ("runtime overhead", r"^(aten::(empty|empty_strided|resize_|as_strided|detach|alias|lift_fresh|result_type)"
                         r"|.*(executor|session|model_run|sequentialexecutor|vm\.builtin|memory\.(alloc|kill))"
                         r"|.*(alloc_storage|alloc_tensor|kill_object|call_packed)"
                         r"|.*(compiled region|compiledfunction|compiledfxgraph|dynamo|cache lookup)|## )"),
    ("matmul/conv", r"(mm|matmul|gemm|gemv|conv|linear|dense|addmm|baddbmm|bmm|attention|sdpa|einsum|mkldnn|onednn)"),
    ("reduction/norm", r"(sum|mean|norm|softmax|reduce|max|min|var|std|argmax|logsumexp|prod|cumsum)"),
    ("data movement", r"(copy|transpose|permute|view|reshape|cat|concat|contiguous|clone|take|gather|slice|"
                      r"index|expand|squeeze|unsqueeze|split|pad|to_copy|_to|flatten|select|stack|repeat|"
                      r"scatter|where_copy|strided)"),
)


def categorize(name: str) -> str:
    """The kind of a kernel, from its name and the ops it holds."""
    lowered = name.lower()
    for category, pattern in _CATEGORY_PATTERNS:
        if re.search(pattern, lowered):
            return category
    return "pointwise"


@dataclass(frozen=True)
class KernelTime:
    """One kernel, per model call: how often it ran and for how long in all."""

    name: str
    calls: float  # per model call
    ms: float  # per model call, summed over its calls
    category: str
    ops: tuple[str, ...] = ()  # the source ops it holds, where the backend says so


@dataclass(frozen=True)
class KernelProfile:
    """What one compiled model runs per call, as its own instrument reports it."""

    instrument: str  # e.g. "torch.profiler", "onnxruntime session profiling"
    calls: int  # model calls profiled
    profiled_call_ms: float  # wall ms per profiled call (instrumented: above the timed median)
    kernels: tuple[KernelTime, ...]
    note: str = ""  # what the instrument does not see
    facts: dict[str, Any] = field(default_factory=dict)  # e.g. {"profiled build": "..."}

    @property
    def kernel_ms(self) -> float:
        return sum(k.ms for k in self.kernels)

    @property
    def launches(self) -> float:
        return sum(k.calls for k in self.kernels)


class ProfileUnavailable(RuntimeError):
    """The backend exposes no per-kernel account here; the message says why."""


def wall_ms_per_call(run: Callable[[Any], Any], arg: Any, calls: int, sync: Callable[[], None]) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        run(arg)
    sync()
    return (time.perf_counter() - start) * 1e3 / calls


def per_call(rows: Iterable[tuple[str, int, float, tuple[str, ...]]], calls: int) -> tuple[KernelTime, ...]:
    """(name, total count, total ms, ops) summed over ``calls`` model calls -> per call,
    the longest first; rows of the same name are merged."""
    merged: dict[str, list] = {}
    for name, count, ms, ops in rows:
        entry = merged.setdefault(name, [0, 0.0, ops])
        entry[0] += count
        entry[1] += ms
    kernels = [KernelTime(name, count / calls, ms / calls, categorize(" ".join((name,) + tuple(ops))), tuple(ops))
               for name, (count, ms, ops) in merged.items()]
    return tuple(sorted(kernels, key=lambda k: -k.ms))


def fused_kernel_ops(name: str) -> tuple[str, ...]:
    """The ops a fused kernel's name lists: Inductor's ``graph_0_cpp_fused_add_mul_sin_0``
    -> ``("add", "mul", "sin")``, TVM's ``fused_matmul_add1`` -> ``("matmul", "add1")``
    (both name a fused kernel after the ops in it)."""
    match = re.search(r"fused_(.*?)(_\d+)?$", name)
    return tuple(op for op in match.group(1).split("_") if op) if match else ()


def torch_profile(run: Callable[[Any], Any], arg: Any, calls: int, sync: Callable[[], None],
                  kernel_ops: Callable[[str], tuple[str, ...]] = lambda name: ()) -> KernelProfile:
    """Per-op self time from ``torch.profiler`` (CPU activities): the leaves of the
    call tree, so the shares sum to the profiled call. Ops without self time (wrappers
    such as ``aten::linear`` around ``aten::addmm``) are left out."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        wall = wall_ms_per_call(run, arg, calls, sync)
    rows = [(evt.key, evt.count, evt.self_cpu_time_total / 1e3, kernel_ops(evt.key))
            for evt in prof.key_averages() if evt.self_cpu_time_total > 0]
    return KernelProfile(f"torch.profiler {torch.__version__}", calls, wall, per_call(rows, calls))


def launch_bound_share(kernel_ms: float, call_ms: float) -> float | None:
    """How much of a call the GPU spends idle: 1 - (its kernels' device time / the call's
    wall time). Near 0: the kernels fill the call; near 1: launches and host work decide it."""
    if call_ms <= 0:
        return None
    return min(1.0, max(0.0, 1.0 - kernel_ms / call_ms))


def torch_cuda_profile(run: Callable[[Any], Any], arg: Any, calls: int, sync: Callable[[], None]) -> KernelProfile:
    """The CUDA kernels of ``calls`` calls from ``torch.profiler`` (CPU and CUDA activities,
    device time per kernel), and the launch-bound share of the call (``launch_bound_share``)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        wall = wall_ms_per_call(run, arg, calls, sync)
    rows = [(evt.key, evt.count, evt.self_device_time_total / 1e3, ()) for evt in prof.key_averages()
            if evt.device_type == DeviceType.CUDA and evt.self_device_time_total > 0]
    kernels = per_call(rows, calls)
    busy = sum(k.ms for k in kernels)
    share = launch_bound_share(busy, wall)
    return KernelProfile(f"torch.profiler {torch.__version__} (CUDA)", calls, wall, kernels,
                         note="device time of CUDA kernels; the rest of the call is launch and host time",
                         facts={"gpu_busy_ms": busy, "launch_bound_share": share})


def profile_second_build(run: Callable[[Any], Any], arg: Any, calls: int, warm_calls: int, fact: str) -> KernelProfile:
    """``torch_profile`` of a second build made to be profiled (its kernels wrapped in
    profiler records, which the timed build must not pay for), after ``warm_calls``
    untimed calls; CPU only, so nothing to synchronize."""
    import dataclasses

    for _ in range(warm_calls):
        run(arg)
    profile = torch_profile(run, arg, calls, lambda: None, fused_kernel_ops)
    return dataclasses.replace(profile, facts={"profiled build": fact})


def onnxruntime_profile(profile_file: str, calls: int, wall_ms: float) -> KernelProfile:
    """Node events from an ONNX Runtime session profile (chrome trace JSON): one row per
    graph node, named as ORT's optimizer left it (fused nodes keep their fused names).
    The session's first run is its warm-up; only the ``calls`` runs after it count."""
    import json

    events = json.loads(open(profile_file).read())
    runs = sorted(e["ts"] for e in events if e.get("cat") == "Session" and e.get("name") == "model_run")
    if len(runs) < calls + 1:
        raise ProfileUnavailable(f"ORT's profile holds {len(runs)} runs, expected {calls + 1}")
    start = runs[-calls]
    rows = []
    for evt in events:
        if evt.get("cat") != "Node" or not evt.get("name", "").endswith("_kernel_time") or evt.get("ts", 0) < start:
            continue
        args = evt.get("args", {})
        op = args.get("op_name", "?")
        rows.append((f"{op}:{evt['name'][: -len('_kernel_time')]}", 1, evt.get("dur", 0) / 1e3, (op,)))
    return KernelProfile("onnxruntime session profiling", calls, wall_ms, per_call(rows, calls))


@dataclass(frozen=True)
class CrossCheck:
    """One compiled artifact re-timed by the tool its backend's engineers use, on the same
    inputs and threads: the check that dlcompare's own timing is not what moves a figure."""

    tool: str  # e.g. "iree-benchmark-module", "benchmark_app"
    median_ms: float
    runs: int  # timed calls (or repetitions) behind the median
    note: str = ""


def torch_timer(run: Callable[[Any], Any], prepared: Any, seconds: float) -> CrossCheck:
    """``torch.utils.benchmark.Timer``, PyTorch's own benchmark tool, at this process's
    thread count (its default is one thread)."""
    import torch
    from torch.utils.benchmark import Timer

    timer = Timer(stmt="run(prepared)", globals={"run": run, "prepared": prepared},
                  num_threads=torch.get_num_threads())
    measured = timer.blocked_autorange(min_run_time=seconds)
    return CrossCheck("torch.utils.benchmark.Timer", measured.median * 1e3, len(measured.times) * measured.number_per_run)


def ort_benchmark_helper(session, feed: Any, seconds: float) -> CrossCheck:
    """The loop of ORT's own benchmark helper (``onnxruntime.transformers.benchmark_helper.
    inference_ort``: ``timeit.repeat`` of ``session.run``, one call per repeat, after a dry
    run) on the timed session, for about ``seconds``; the median of its per-call times (the
    helper itself reports a mean rounded to 0.01 ms). ORT's session profiler is no cross-
    check: on the small MLP its model_run events read 8x the call, its own cost per node."""
    import statistics
    import timeit

    timeit.repeat(lambda: session.run(None, feed), number=1, repeat=3)
    one = statistics.median(timeit.repeat(lambda: session.run(None, feed), number=1, repeat=5))
    repeats = int(min(100_000, max(10, seconds / max(one, 1e-6))))
    times = timeit.repeat(lambda: session.run(None, feed), number=1, repeat=repeats)
    return CrossCheck("onnxruntime benchmark_helper loop (timeit.repeat of session.run)",
                      statistics.median(times) * 1e3, repeats)


def tool_path(name: str) -> str:
    """A backend's command-line tool: beside this Python (the venv's bin/), else on PATH."""
    import shutil
    import sys
    from pathlib import Path

    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else (shutil.which(name) or name)
