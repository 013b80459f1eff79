"""IREE (MLIR-based): torch -> iree-turbine ``aot.export`` -> llvm-cpu vmfb -> IREE runtime.

Phases: ``export`` (torch.export + import to MLIR), ``compile`` (MLIR -> .vmfb for
the host CPU), ``load`` (map the vmfb into a runtime context), ``first_call``.
The .vmfb is host-CPU specific (``--iree-llvmcpu-target-cpu=host``; without it the
code was ~6x slower), so its cache key holds the CPU and the compiler version.

``--scenario offline`` (CPU) keeps S invocations in flight (S = ``--iree-offline-streams``,
default 2) the way IREE's own iree-benchmark-module does with ``--batch_concurrency``: the
module's coarse-fences entry point ``main$async`` (wait and signal fences after the inputs)
issued on S timelines from one Python thread, its invoke returning once the work is queued,
and one local-task device whose task workers, the run's threads, run them all. (S Python
threads calling the sync ``main``, each on its own context, overlap too, since invoke releases
the GIL, but were slower than back to back here: scripts/experiments/iree_streams.py.)
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from . import artifacts
from .base import (
    Backend,
    BackendOptions,
    CompileContext,
    Compiled,
    CompileResult,
    DelegatingSession,
    StreamPool,
    StreamSetting,
    cuda_arch,
    cuda_arch_option,
    export_dynamic_shapes,
    option,
    process_thread_names,
)
from .profiling import CrossCheck, KernelProfile, ProfileUnavailable, per_call, tool_path

VMFB = "module.vmfb"


class IreeCompiled(Compiled):
    def __init__(self, function, device, keep_alive, profiling: "IreeProfiling | None" = None,
                 streams: "OfflineStreams | None" = None):
        self._function = function
        self._device = device
        self._keep_alive = keep_alive  # the context and module must outlive the function
        self._profiling = profiling
        self._streams = streams  # --scenario offline (CPU): main$async and the streams to keep in flight

    def stream_pool(self, prepared: Any) -> StreamPool | None:
        return IreeStreamPool(self._streams, prepared) if self._streams else None

    def profile(self, prepared: Any, calls: int) -> KernelProfile:
        if self._profiling is None:
            raise ProfileUnavailable("IREE's CUDA dispatches are not profiled yet")
        return self._profiling.profile([array.to_host() for array in prepared], calls)

    def libraries(self, prepared: Any, kinds: set[str]) -> dict[str, str] | None:
        if self._profiling is None:
            return None
        # Data-tiled matmuls become mmt4d dispatches that call IREE's ukernel; the rest is codegen.
        mmt4d = b"mmt4d" in self._profiling.vmfb.read_bytes()
        return {kind: "IREE mmt4d ukernel" if kind == "gemm" and mmt4d else "IREE-generated" for kind in sorted(kinds)}

    def crosscheck(self, prepared: Any, seconds: float) -> CrossCheck:
        if self._profiling is None:
            raise ProfileUnavailable("IREE's CUDA modules are not cross-checked yet")
        return self._profiling.crosscheck([array.to_host() for array in prepared], seconds)

    def prepare(self, inputs: Sequence[Any]) -> Any:
        import iree.runtime as rt

        # Uploaded once: numpy inputs would add a host->device copy to every timed call.
        return [rt.asdevicearray(self._device, t.detach().cpu().numpy()) for t in inputs]

    def run(self, prepared: Any) -> Any:
        return self._function(*prepared)

    def outputs_to_torch(self, outputs: Any) -> list[Any]:
        import torch

        if isinstance(outputs, (list, tuple)):
            flat = []
            for item in outputs:
                flat.extend(self.outputs_to_torch(item))
            return flat
        return [torch.from_numpy(outputs.to_host().copy())]


ASYNC_FUNCTION = "main$async"  # iree-turbine's torch import emits it beside ``main`` (the coarse-fences ABI)


@dataclass(frozen=True)
class OfflineStreams:
    """--scenario offline: the module's ``main$async`` in the cell's context, its device,
    the streams to keep in flight and the device's task workers."""

    context: Any  # the VmContext ``main`` runs in (one thread issues every invocation)
    function: Any  # the VmFunction ``main$async``
    device: Any
    count: int
    task_workers: int


def invoke_async(streams: OfflineStreams, inputs: Sequence[Any], wait: Any, signal: Any) -> Any:
    """One coarse-fences invocation: its work is queued after ``wait`` and signals ``signal``
    when its results are ready; returns the result list (valid once signalled). ``invoke``
    returns once the work is queued, not done (IREE's task workers run it)."""
    import iree.runtime as rt

    arg_list = rt.VmVariantList(len(inputs) + 2)
    for view in inputs:
        arg_list.push_ref(view)
    arg_list.push_ref(wait)
    arg_list.push_ref(signal)
    results = rt.VmVariantList(1)
    streams.context.invoke(streams.function, arg_list, results)
    return results


# How --scenario offline drives IREE: said once, for the settings and the throughput's source.
OFFLINE_DRIVER = (f"{ASYNC_FUNCTION} on one timeline per stream from one Python thread (iree-benchmark-module's "
                  "--batch_concurrency), one invocation in flight on each, the local-task device's task workers "
                  "shared by all")


class IreeStreamPool(StreamPool):
    """IREE's own way of keeping several invocations in flight (iree-benchmark-module's
    ``--batch_concurrency``): ``main$async`` on S timelines, one semaphore each, every
    invocation queued after its stream's previous one. Before issuing on a stream the host
    waits for that stream's previous request, so at most S are in flight; one Python thread
    keeps them queued while the task workers run them."""

    def __init__(self, streams: OfflineStreams, prepared: Any):
        self._streams = streams
        self._inputs = [array._buffer_view for array in prepared]  # the uploaded DeviceArrays' HalBufferViews
        self._semaphores = [streams.device.create_semaphore(0) for _ in range(streams.count)]
        self._values = [0] * streams.count  # each timeline's last signalled-to value

    def run_requests(self, requests: int) -> None:
        import iree.runtime as rt

        count, semaphores, values = self._streams.count, self._semaphores, self._values
        # Each stream's last results stay referenced until it completed (as iree-benchmark-module
        # keeps its invocations' outputs until its completion fence).
        results: list[Any] = [None] * count
        for i in range(requests):
            stream = i % count
            semaphore, value = semaphores[stream], values[stream]
            semaphore.wait(value)  # this stream's last request completed: at most ``count`` in flight
            results[stream] = self._invoke(rt.HalFence.create_at(semaphore, value),
                                           rt.HalFence.create_at(semaphore, value + 1))
            values[stream] = value + 1
        for semaphore, value in zip(semaphores, values):
            semaphore.wait(value)

    def _invoke(self, wait: Any, signal: Any) -> Any:
        return invoke_async(self._streams, self._inputs, wait, signal)

    def setting(self) -> StreamSetting:
        count, workers = self._streams.count, self._streams.task_workers
        return StreamSetting(streams=count, requests_in_flight=count, threads_per_stream=None,
                             source=f"dlcompare's choice (--iree-offline-streams {count}): {OFFLINE_DRIVER}; "
                                    f"{workers} task workers")


# Decided by the A/B sweep in docs/results/2026-12-01-xeon-backend-configs.md
# (scripts/experiments/iree_sweep.py): data tiling, as IREE's CPU guide says (mlp 0.64x ->
# 0.89x, attention 0.51x -> 0.74x), but not its O2: O2's aggressive dispatch fusion made
# norm_residual (1 dispatch instead of 8) and attention about 2.8x slower than O0.
DEFAULT_OPT_LEVEL = "O0"
DEFAULT_DATA_TILING = True
DEFAULT_OFFLINE_STREAMS = 2
GUIDE_DEVIATION = ("--iree-opt-level=O0, not the CPU guide's O2: at O2 norm_residual ran 2.8x and attention "
                   "2.8x slower here (A/B in docs/results/2026-12-01-xeon-backend-configs.md)")


@dataclass(frozen=True)
class IreeOptions(BackendOptions):
    cuda_arch: str | None = cuda_arch_option()
    iree_opt_level: str = option(DEFAULT_OPT_LEVEL, "iree-compile's --iree-opt-level (IREE's default O0; its CPU guide "
                                 f"says O2; default here {DEFAULT_OPT_LEVEL}, by the sweep in docs/results/)",
                                 flag="iree-opt-level", choices=("O0", "O1", "O2", "O3"))
    iree_data_tiling: bool = option(DEFAULT_DATA_TILING, "--iree-opt-data-tiling: matmuls packed for the mmt4d "
                                    f"microkernels (default {'on' if DEFAULT_DATA_TILING else 'off'}, by the sweep)",
                                    flag="iree-data-tiling", kind="switch")
    iree_im2col: bool = option(False, "--iree-global-opt-use-im2col-for-convs: convolutions as im2col + matmul "
                               "(default off)", flag="iree-im2col", kind="switch")
    iree_flags: str = option("", "more iree-compile flags, space-separated, appended after the others "
                             "(recorded, and in the vmfb's cache key), e.g. "
                             "'--iree-dispatch-creation-enable-aggressive-fusion=false'", flag="iree-flags",
                             metavar="FLAGS")
    iree_allocator: str = option("default", "the runtime's device allocator: IREE's default, or 'caching' as IREE's "
                                 "benchmark configs run it (default: default)", flag="iree-allocator",
                                 choices=("default", "caching"))
    iree_offline_streams: int = option(DEFAULT_OFFLINE_STREAMS, "--scenario offline: invocations in flight, "
                                       "main$async on one timeline each, on one device whose task workers are the "
                                       f"run's threads (default {DEFAULT_OFFLINE_STREAMS})",
                                       flag="iree-offline-streams", kind="positive_int", metavar="S")


def compile_flags(ctx: CompileContext) -> list[str]:
    """Every flag given to iree-compile for a CPU cell; all of them are in the vmfb's cache key."""
    options = _options(ctx)
    # IREE's docs: target the host CPU, or the code is generic x86-64 (~6x slower here).
    flags = ["--iree-llvmcpu-target-cpu=host", f"--iree-opt-level={options.iree_opt_level}",
             f"--iree-opt-data-tiling={str(options.iree_data_tiling).lower()}"]
    if options.iree_im2col:
        flags.append("--iree-global-opt-use-im2col-for-convs")
    return flags + options.iree_flags.split()


class IreeBackend(Backend):
    name = "iree"
    unsupported_op_patterns = (
        re.compile(r"failed to legalize operation 'torch\.operator'.*?name = \"([\w.]+)\""),  # an op torch-mlir kept opaque
        re.compile(r"failed to legalize operation '([\w.$]+)'"),  # MLIR
    )
    rank = 50
    description = "IREE (MLIR): iree-turbine export, llvm-cpu codegen for the host CPU"
    reproducer = """\
import iree.runtime as rt
from iree.turbine import aot
exported = aot.export(model, args=tuple(inputs))
exported.session.set_flags("--iree-llvmcpu-target-cpu=host")
exported.compile(save_to="model.vmfb", target_backends="llvm-cpu")
module = rt.load_vm_flatbuffer_file("model.vmfb", driver="local-task")
print(module.main(*[x.numpy() for x in inputs]))
"""
    packages = ("iree-base-compiler", "iree-base-runtime", "iree-turbine")
    onnx_frontend = "iree-import-onnx, then iree-compile"
    install_hint = "pip install -e '.[iree]'"
    devices = ("cpu", "cuda")
    options_type = IreeOptions
    runtime_modules = ("iree.compiler", "iree.runtime", "iree.turbine.aot")
    int8_unavailable = ("IREE 3.13 ships no post-training quantizer or calibration tool; it compiles graphs that are "
                        "already quantized, and iree-turbine's export does not take PT2E's quantized_decomposed ops")
    # IREE 3.13 fails to compile for sm_90 (a known upstream bug): fall back through these.
    CUDA_FALLBACKS = ("sm_90", "sm_89", "sm_86", "sm_80")

    def required_modules(self) -> tuple[str, ...]:
        return ("iree.compiler", "iree.runtime", "iree.turbine")

    def settings(self, ctx: CompileContext) -> dict[str, Any]:
        driver = _driver(ctx)
        out: dict[str, Any] = {"driver": driver, "input": "iree-turbine aot.export (torch.export)"}
        if ctx.device == "cpu":
            out.update({"target_backends": "llvm-cpu", "compile_flags": compile_flags(ctx)})
            if _options(ctx).iree_opt_level == "O0":
                out["guide_deviation"] = GUIDE_DEVIATION
        if driver == "local-task":
            out["task_topology_group_count"] = ctx.threads
        out["device_allocator"] = _options(ctx).iree_allocator
        if streams := offline_streams(ctx):
            out.update({"offline_streams": streams, "offline_driver": OFFLINE_DRIVER})
        return out

    def compile(self, module: Any, example_inputs: Sequence[Any], ctx: CompileContext) -> CompileResult:
        build = lambda path: self._export_and_compile(module, example_inputs, ctx, path)  # noqa: E731
        key = {"compile_flags": compile_flags(ctx) if ctx.device == "cpu" else [f"cuda:{cuda_arch(ctx)}"]}
        with artifacts.one_file(self, ctx, VMFB, build, key=key) as (vmfb, cache):
            ctx.info["vmfb_bytes"] = vmfb.stat().st_size
            compiled = self._load(vmfb, ctx)
        return CompileResult(compiled, cache=cache, info=ctx.info)

    def dynamic_session(self, module, example_inputs, dynamic_dims, strategy, ctx):
        if strategy != "symbolic":
            return super().dynamic_session(module, example_inputs, dynamic_dims, strategy, ctx)
        vmfb = ctx.work_dir / "dynamic.vmfb"
        shapes = export_dynamic_shapes(dynamic_dims, ctx.dynamic_max)
        self._export_and_compile(module, example_inputs, ctx, vmfb, shapes)
        return DelegatingSession(self, self._load(vmfb, ctx))

    @staticmethod
    def _compile_cuda(exported, ctx: CompileContext, out: Path) -> None:
        errors = []
        for arch in _cuda_archs(ctx):
            try:
                exported.session.set_flags(f"--iree-cuda-target={arch}")
                exported.compile(save_to=str(out), target_backends="cuda")
            except Exception as exc:  # the compiler's own error; try the next arch
                errors.append(f"{arch}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
                continue
            ctx.info["cuda_arch"] = arch
            if errors:
                ctx.info["cuda_arch_fallback"] = "; ".join(errors)
            return
        raise RuntimeError("IREE could not compile for any CUDA arch: " + "; ".join(errors))

    def _load(self, vmfb: Path, ctx: CompileContext) -> "IreeCompiled":
        import iree.runtime as rt

        with ctx.phase("load"):
            driver = _driver(ctx)
            config = _shared_config(driver, ctx.threads, _options(ctx).iree_allocator)
            context = rt.SystemContext(config=config)
            vm_module = rt.VmModule.mmap(config.vm_instance, str(vmfb))
            context.add_vm_module(vm_module)
            module_name = vm_module.name
            # iree-turbine names the entry point main; iree-import-onnx names it after the graph
            names = [n for n in vm_module.function_names if "$" not in n and not n.startswith("__")]
            function = context.modules[module_name]["main" if "main" in names or len(names) != 1 else names[0]]
            streams = _offline_streams(config, vm_module, context, ctx)
        ctx.info["driver"] = driver
        if driver == "local-task":
            ctx.info["task_workers_observed"] = iree_worker_threads(expected=ctx.threads)
        profiling = (IreeProfiling(vmfb, driver, ctx.threads, ctx.work_dir, _options(ctx).iree_allocator)
                     if ctx.device == "cpu" else None)
        return IreeCompiled(function, config.device, (context, vm_module, config), profiling, streams)

    @classmethod
    def _export_and_compile(cls, module, example_inputs, ctx: CompileContext, vmfb: Path, dynamic_shapes=None) -> None:
        from iree.turbine import aot

        if getattr(module, "onnx_path", None):
            return _import_onnx_and_compile(module.onnx_path, ctx, vmfb)
        with ctx.phase("export"):
            exported = aot.export(module, args=tuple(example_inputs), dynamic_shapes=dynamic_shapes)
        with ctx.phase("compile"):
            tmp = vmfb.with_name(f".{vmfb.name}.{os.getpid()}.tmp")
            if ctx.device == "cuda":
                cls._compile_cuda(exported, ctx, tmp)
            else:
                exported.session.set_flags(*compile_flags(ctx))
                with compiler_errors(ctx.work_dir):
                    exported.compile(save_to=str(tmp), target_backends="llvm-cpu")
            os.replace(tmp, vmfb)  # a concurrent reader sees the old file or the new one


def _import_onnx_and_compile(onnx_path: Path, ctx: CompileContext, vmfb: Path) -> None:
    """--model onnx:PATH: IREE's own ONNX importer (iree-import-onnx, opset raised to 17, the
    oldest it lowers), then the same iree-compile flags as every IREE cell."""
    import subprocess
    import sys

    from iree.compiler import tools

    mlir = ctx.work_dir / "model.mlir"
    with ctx.phase("export"):
        proc = subprocess.run([sys.executable, "-m", "iree.compiler.tools.import_onnx", str(onnx_path), "-o", str(mlir),
                               "--opset-version", "17"], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"iree-import-onnx failed: {first_error(proc.stderr) or proc.stderr.strip()[-300:]}")
    with ctx.phase("compile"):
        tmp = vmfb.with_name(f".{vmfb.name}.{os.getpid()}.tmp")
        with compiler_errors(ctx.work_dir):
            tools.compile_file(str(mlir), output_file=str(tmp), target_backends=["llvm-cpu"],
                               extra_args=compile_flags(ctx))
        os.replace(tmp, vmfb)


def _offline_streams(config, vm_module, context, ctx: CompileContext) -> OfflineStreams | None:
    """--scenario offline: ``main$async`` in the cell's context; None otherwise."""
    count = offline_streams(ctx)
    if not count:
        return None
    function = vm_module.lookup_function(ASYNC_FUNCTION)
    if function is None:  # not from iree-turbine's torch import: no coarse-fences entry point
        raise RuntimeError(f"--scenario offline: the module has no {ASYNC_FUNCTION} "
                           f"(it exports {', '.join(vm_module.function_names)})")
    return OfflineStreams(context.vm_context, function, config.device, count, ctx.threads)


def first_error(diagnostics: str) -> str | None:
    """The first ``error:`` of iree-compile's diagnostics, without its source location."""
    for line in diagnostics.splitlines():
        if "error:" in line:
            return line[line.index("error:"):].strip()
    return None


@contextlib.contextmanager
def compiler_errors(work_dir: Path) -> Iterator[None]:
    """The in-process compiler prints its diagnostics to fd 2, while the exception says only
    that it failed: capture them, so a failed compile raises with the compiler's own first
    error (its whole text still reaches the cell's log)."""
    capture_path = work_dir / "iree-compile.stderr"
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(capture_path, "w+b") as capture:
            os.dup2(capture.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    except Exception as exc:
        line = first_error(capture_path.read_text(errors="replace"))
        if line is None or line in str(exc):
            raise
        raise RuntimeError(f"iree-compile {line}") from exc
    finally:
        os.close(saved)
        sys.stderr.write(capture_path.read_text(errors="replace"))


@dataclass(frozen=True)
class IreeProfiling:
    """IREE's own tools on the cell's .vmfb, on the same driver, worker count and allocator:
    ``iree-benchmark-module`` times it (the cross-check); with host-execution events on (what
    IREE 3.13's local CPU devices record; dispatch-events are UNIMPLEMENTED there) it
    profiles it, and ``iree-profile dispatch`` reads the bundle back: per executable
    function, its count and summed time."""

    vmfb: Path
    driver: str
    threads: int
    work_dir: Path
    allocator: str = "default"

    def _benchmark(self, inputs: list[Any], *flags: str) -> dict[str, Any]:
        """iree-benchmark-module's JSON report on these inputs (saved as .npy)."""
        import json
        import subprocess

        import numpy as np

        args = []
        for i, array in enumerate(inputs):
            path = self.work_dir / f"benchmark-input-{i}.npy"
            np.save(path, array)
            args.append(f"--input=@{path}")
        allocator = [f"--device_allocator={self.allocator}"] if self.allocator != "default" else []
        bench = subprocess.run(
            [tool_path("iree-benchmark-module"), f"--module={self.vmfb}", "--function=main", f"--device={self.driver}",
             *args, f"--task_topology_group_count={self.threads}", *allocator, "--benchmark_format=json", *flags],
            capture_output=True, text=True, timeout=600)
        if bench.returncode != 0:
            raise ProfileUnavailable(f"iree-benchmark-module failed: {bench.stderr.strip().splitlines()[-1:]}")
        return json.loads(bench.stdout)

    def crosscheck(self, inputs: list[Any], seconds: float) -> CrossCheck:
        repetitions = 5
        report = self._benchmark(inputs, f"--benchmark_repetitions={repetitions}",
                                 f"--benchmark_min_time={seconds / repetitions:.3f}s")
        median = next(r for r in report["benchmarks"] if r.get("aggregate_name") == "median")
        return CrossCheck("iree-benchmark-module", _ms(median), repetitions,
                          note="median of 5 repetitions, each a mean over its calls")

    def profile(self, inputs: list[Any], calls: int) -> KernelProfile:
        bundle = self.work_dir / "iree.ireeprof"
        report = self._benchmark(inputs, f"--benchmark_min_time={calls}x", "--benchmark_repetitions=1",
                                 "--device_profiling_mode=host-execution", f"--device_profiling_output={bundle}")
        row = report["benchmarks"][0]
        runs = int(row["iterations"])
        rows = [(r["key"], int(r["count"]), float(r["total_ns"]) / 1e6, ()) for r in _dispatch_rows(bundle)
                if r.get("type") == "host_dispatch_group"]
        return KernelProfile("IREE HAL profiling (iree-benchmark-module + iree-profile dispatch)", runs, _ms(row),
                             per_call(rows, runs),
                             note="host-execution time per dispatch (the CPU is the device); the VM's own calls are not listed")


def _ms(row: dict[str, Any]) -> float:
    """A google-benchmark row's real time per iteration, in ms."""
    return float(row["real_time"]) * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[row["time_unit"]]


def _dispatch_rows(bundle: Path) -> list[dict[str, Any]]:
    """``iree-profile dispatch --format=jsonl``: one row per executable function."""
    import json
    import subprocess

    proc = subprocess.run([tool_path("iree-profile"), "dispatch", "--format=jsonl", str(bundle)],
                          capture_output=True, text=True, timeout=300, check=True)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip().startswith("{")]


def offline_streams(ctx: CompileContext) -> int:
    """--scenario offline on the CPU: the invocations kept in flight; 0 otherwise."""
    if ctx.scenario != "offline" or ctx.device != "cpu":
        return 0
    return _options(ctx).iree_offline_streams


def _driver(ctx: CompileContext) -> str:
    if ctx.device == "cuda":
        return "cuda"
    # local-sync runs each invocation inline, inside invoke: nothing could be in flight beside
    # it. Offline with several streams, local-task's workers (one per thread) run them.
    return "local-sync" if ctx.threads == 1 and offline_streams(ctx) <= 1 else "local-task"


def _options(ctx: CompileContext) -> IreeOptions:
    return ctx.options if isinstance(ctx.options, IreeOptions) else IreeOptions()


_CONFIGS: dict[tuple[str, str], Any] = {}


def _shared_config(driver: str, threads: int, allocator: str = "default"):
    """One IREE device per process: every module loaded here (one per shape in the
    dynamic-shape experiment) shares its workers, instead of each adding its own pool."""
    import iree.runtime as rt

    if (driver, allocator) not in _CONFIGS:
        if driver == "local-task":
            # Exactly one worker per thread of the run, like every other backend.
            # (--task_topology_max_group_count only caps IREE's physical-core topology,
            # which can give fewer workers than threads on SMT siblings.)
            rt.flags.parse_flags(f"--task_topology_group_count={threads}")
        if allocator == "default":
            _CONFIGS[driver, allocator] = rt.Config(driver)
        else:  # --device_allocator is read by IREE's command-line tools only; Python passes it here
            device = rt.get_driver(driver).create_default_device(allocators=[allocator])
            _CONFIGS[driver, allocator] = rt.Config(device=device)
    return _CONFIGS[driver, allocator]


WORKER_START_TIMEOUT_S = 10.0


def iree_worker_threads(expected: int, timeout_s: float = WORKER_START_TIMEOUT_S) -> int | None:
    """IREE's task workers alive in this process, counted by the names IREE's runtime gives
    their threads (``iree-worker-N``): the worker count as IREE itself set it up.

    Each worker names itself once it first runs, and the device starts them without waiting,
    so a read right after loading found 1 of 2 under load (issue 43). Poll until ``expected``
    are named or ``timeout_s`` passes, then report what is there: a shortfall that lasts
    seconds is a real one."""
    deadline = time.monotonic() + timeout_s
    while True:
        names = process_thread_names()
        if names is None:
            return None
        count = sum(name.startswith("iree-worker") for name in names)
        if count >= expected or time.monotonic() >= deadline:
            return count
        time.sleep(0.005)


def _cuda_archs(ctx: CompileContext) -> list[str]:
    """The GPU's own arch first (or ``--cuda-arch``), then older ones that compile."""
    wanted = cuda_arch(ctx)
    fallbacks = [a for a in IreeBackend.CUDA_FALLBACKS if int(a[3:]) < int(wanted[3:])]
    return [wanted] + fallbacks
