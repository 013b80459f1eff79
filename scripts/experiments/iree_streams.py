"""Can IREE's Python runtime keep several invocations in flight on CPU? (issue 32)

Compiles one workload to a vmfb with the adapter's flags, then times N requests three ways
on a local-task device of ``--threads`` workers:

- ``b2b``: one context, the sync ``main``, back to back;
- ``threads-S``: S Python threads, each invoking ``main`` on its own VmContext (a context is
  "thread-compatible and must be externally synchronized", iree/vm/context.h) over the one
  shared device; counts how many threads were inside ``invoke`` at once (it releases the
  GIL in runtime/bindings/python/vm.cc if that count reaches S);
- ``pool-S``: the adapter's offline pool (adapters/iree.py ``IreeStreamPool``): one context,
  ``main$async`` (the coarse-fences ABI iree-turbine's torch import emits) on S timelines
  from one thread, as iree-benchmark-module's ``--batch_concurrency`` does.

    flock /work/runs/cpu.lock python scripts/experiments/iree_streams.py --size small --threads 1
"""
from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path


def build_vmfb(workload_name: str, size: str, threads: int, out: Path) -> tuple[Path, list]:
    from adapters.base import CompileContext
    from adapters.iree import IreeBackend, IreeOptions
    from workloads import build_model, builtin_workloads, make_inputs

    workload = builtin_workloads()[workload_name]
    model = build_model(workload, size)
    inputs = make_inputs(workload.input_specs(size))
    ctx = CompileContext(workload_name, "exp", "cpu", threads, out, options=IreeOptions())
    vmfb = out / "module.vmfb"
    IreeBackend._export_and_compile(model, inputs, ctx, vmfb)
    return vmfb, [t.numpy() for t in inputs]


def device_for(threads: int):
    import iree.runtime as rt

    rt.flags.parse_flags(f"--task_topology_group_count={threads}")
    return rt.Config("local-task")


def contexts(config, vmfb: Path, count: int):
    import iree.runtime as rt

    vm_module = rt.VmModule.mmap(config.vm_instance, str(vmfb))
    out = []
    for _ in range(count):
        context = rt.SystemContext(config=config)
        context.add_vm_module(vm_module)
        out.append(context)
    return vm_module, out


def b2b(function, args, requests: int) -> float:
    start = time.perf_counter()
    for _ in range(requests):
        function(*args)
    return time.perf_counter() - start


def threaded(functions, args, requests: int) -> tuple[float, int, float]:
    """Wall seconds; the most threads inside ``VmContext.invoke`` at once; the seconds during
    which two or more were. Each interval is read in Python around the binding's call: if that
    call held the GIL, no other thread could read the clock inside it, so intervals of
    different threads could not overlap."""
    lock, left = threading.Lock(), [requests]
    intervals: list[tuple[float, float]] = []

    def stream(function) -> None:
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            function(*args)

    functions = timed_invokers(functions, intervals)
    workers = [threading.Thread(target=stream, args=(f,)) for f in functions]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - start, *overlap(intervals)


def timed_invokers(functions, intervals: list[tuple[float, float]]) -> list:
    """The same functions, each appending the interval of its every ``VmContext.invoke``
    (FunctionInvoker's own ``_invoke`` hook; its instances have slots, so a subclass)."""
    from iree.runtime import FunctionInvoker

    class TimedInvoker(FunctionInvoker):
        def _invoke(self, arg_list, ret_list):
            t0 = time.perf_counter()
            super()._invoke(arg_list, ret_list)
            intervals.append((t0, time.perf_counter()))

    return [TimedInvoker(f._vm_context, f._device, f._vm_function) for f in functions]


def overlap(intervals: list[tuple[float, float]]) -> tuple[int, float]:
    """The most intervals open at once, and the seconds with two or more open."""
    events = sorted([(t, 1) for t, _ in intervals] + [(t, -1) for _, t in intervals])
    open_, most, shared, last = 0, 0, 0.0, 0.0
    for t, step in events:
        if open_ >= 2:
            shared += t - last
        open_ += step
        most = max(most, open_)
        last = t
    return most, shared


def pool_streams(config, context, vm_module, args, streams: int, threads: int, requests: int) -> float:
    """The adapter's own offline pool: main$async on ``streams`` timelines from this thread."""
    from adapters.iree import ASYNC_FUNCTION, IreeStreamPool, OfflineStreams

    function = vm_module.lookup_function(ASYNC_FUNCTION)
    pool = IreeStreamPool(OfflineStreams(context.vm_context, function, config.device, streams, threads), args)
    pool.run_requests(streams * 4)  # warm
    start = time.perf_counter()
    pool.run_requests(requests)
    return time.perf_counter() - start


def main() -> None:
    import iree.runtime as rt

    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="mlp")
    parser.add_argument("--size", default="small")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--streams", default="1,2,4")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        vmfb, host_inputs = build_vmfb(args.workload, args.size, args.threads, Path(tmp))
        config = device_for(args.threads)
        counts = [int(s) for s in args.streams.split(",")]
        vm_module, ctxs = contexts(config, vmfb, max(counts))
        inputs = [rt.asdevicearray(config.device, a) for a in host_inputs]
        main_of = [c.modules[vm_module.name]["main"] for c in ctxs]
        print("functions:", vm_module.function_names)
        b2b(main_of[0], inputs, 50)
        for rep in range(args.reps):
            seconds = b2b(main_of[0], inputs, args.requests)
            print(f"[{rep}] b2b (main): {args.requests / seconds:.1f} req/s")
            for s in counts:
                seconds = pool_streams(config, ctxs[0], vm_module, inputs, s, args.threads, args.requests)
                print(f"[{rep}] pool-{s} (main$async on {s} timelines, one thread): {args.requests / seconds:.1f} req/s")
            for s in counts:
                seconds, most, shared = threaded(main_of[:s], inputs, args.requests)
                print(f"[{rep}] threads-{s} (main on own contexts): {args.requests / seconds:.1f} req/s, at most {most} "
                      f"threads inside invoke at once, 2+ inside for {shared / seconds:.0%} of the wall time")


if __name__ == "__main__":
    main()
