"""IREE (MLIR-based): torch -> iree-turbine ``aot.export`` -> llvm-cpu vmfb -> IREE runtime.

Phases: ``export`` (torch.export + import to MLIR), ``compile`` (MLIR -> .vmfb for
the host CPU), ``load`` (map the vmfb into a runtime context), ``first_call``.
The .vmfb is host-CPU specific (``--iree-llvmcpu-target-cpu=host``; without it the
code was ~6x slower), so its cache key holds the CPU and the compiler version.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from . import artifacts
from .base import (
    Backend,
    BackendOptions,
    CompileContext,
    Compiled,
    CompileResult,
    DelegatingSession,
    cuda_arch,
    cuda_arch_option,
    export_dynamic_shapes,
)
from .profiling import KernelProfile, ProfileUnavailable, per_call

VMFB = "module.vmfb"


class IreeCompiled(Compiled):
    def __init__(self, function, device, keep_alive, profiling: "IreeProfiling | None" = None):
        self._function = function
        self._device = device
        self._keep_alive = keep_alive  # the context and module must outlive the function
        self._profiling = profiling

    def profile(self, prepared: Any, calls: int) -> KernelProfile:
        if self._profiling is None:
            raise ProfileUnavailable("IREE's CUDA dispatches are not profiled yet")
        return self._profiling.profile([array.to_host() for array in prepared], calls)

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


@dataclass(frozen=True)
class IreeOptions(BackendOptions):
    cuda_arch: str | None = cuda_arch_option()


class IreeBackend(Backend):
    name = "iree"
    rank = 50
    description = "IREE (MLIR): iree-turbine export, llvm-cpu codegen for the host CPU"
    packages = ("iree-base-compiler", "iree-base-runtime", "iree-turbine")
    install_hint = "pip install -e '.[iree]'"
    devices = ("cpu", "cuda")
    options_type = IreeOptions
    runtime_modules = ("iree.compiler", "iree.runtime", "iree.turbine.aot")
    # IREE 3.13 fails to compile for sm_90 (a known upstream bug): fall back through these.
    CUDA_FALLBACKS = ("sm_90", "sm_89", "sm_86", "sm_80")

    def required_modules(self) -> tuple[str, ...]:
        return ("iree.compiler", "iree.runtime", "iree.turbine")

    def settings(self, ctx: CompileContext) -> dict[str, Any]:
        driver = _driver(ctx)
        out: dict[str, Any] = {"driver": driver, "input": "iree-turbine aot.export (torch.export)"}
        if ctx.device == "cpu":
            # IREE's docs: target the host CPU, or the code is generic x86-64 (~6x slower here).
            out.update({"target_backends": "llvm-cpu", "iree-llvmcpu-target-cpu": "host"})
        if driver == "local-task":
            out["task_topology_group_count"] = ctx.threads
        return out

    def compile(self, module: Any, example_inputs: Sequence[Any], ctx: CompileContext) -> CompileResult:
        build = lambda path: self._export_and_compile(module, example_inputs, ctx, path)  # noqa: E731
        with artifacts.one_file(self, ctx, VMFB, build) as (vmfb, cache):
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
            config = _shared_config(driver, ctx.threads)
            context = rt.SystemContext(config=config)
            vm_module = rt.VmModule.mmap(config.vm_instance, str(vmfb))
            context.add_vm_module(vm_module)
            module_name = vm_module.name
            function = context.modules[module_name]["main"]
        ctx.info["driver"] = driver
        if driver == "local-task":
            ctx.info["task_workers_observed"] = iree_worker_threads()
        profiling = IreeProfiling(vmfb, driver, ctx.threads, ctx.work_dir) if ctx.device == "cpu" else None
        return IreeCompiled(function, config.device, (context, vm_module, config), profiling)

    @classmethod
    def _export_and_compile(cls, module, example_inputs, ctx: CompileContext, vmfb: Path, dynamic_shapes=None) -> None:
        from iree.turbine import aot

        with ctx.phase("export"):
            exported = aot.export(module, args=tuple(example_inputs), dynamic_shapes=dynamic_shapes)
        with ctx.phase("compile"):
            tmp = vmfb.with_name(f".{vmfb.name}.{os.getpid()}.tmp")
            if ctx.device == "cuda":
                cls._compile_cuda(exported, ctx, tmp)
            else:
                exported.session.set_flags("--iree-llvmcpu-target-cpu=host")
                exported.compile(save_to=str(tmp), target_backends="llvm-cpu")
            os.replace(tmp, vmfb)  # a concurrent reader sees the old file or the new one


@dataclass(frozen=True)
class IreeProfiling:
    """IREE's own HAL profiler: ``iree-benchmark-module`` runs the same .vmfb on the same
    driver and worker count with host-execution events on (what IREE 3.13's local CPU
    devices record; dispatch-events are UNIMPLEMENTED there), and ``iree-profile dispatch``
    reads the bundle back: per executable function, its count and summed time."""

    vmfb: Path
    driver: str
    threads: int
    work_dir: Path

    def profile(self, inputs: list[Any], calls: int) -> KernelProfile:
        import json
        import subprocess

        import numpy as np

        args = []
        for i, array in enumerate(inputs):
            path = self.work_dir / f"profile-input-{i}.npy"
            np.save(path, array)
            args.append(f"--input=@{path}")
        bundle = self.work_dir / "iree.ireeprof"
        bench = subprocess.run(
            [_tool("iree-benchmark-module"), f"--module={self.vmfb}", "--function=main", f"--device={self.driver}",
             *args, f"--task_topology_group_count={self.threads}", f"--benchmark_min_time={calls}x",
             "--benchmark_repetitions=1", "--benchmark_format=json", "--device_profiling_mode=host-execution",
             f"--device_profiling_output={bundle}"], capture_output=True, text=True, timeout=600)
        if bench.returncode != 0:
            raise ProfileUnavailable(f"iree-benchmark-module failed: {bench.stderr.strip().splitlines()[-1:]}")
        report = json.loads(bench.stdout)["benchmarks"][0]
        runs = int(report["iterations"])
        wall = float(report["real_time"]) * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[report["time_unit"]]
        rows = [(r["key"], int(r["count"]), float(r["total_ns"]) / 1e6, ()) for r in _dispatch_rows(bundle)
                if r.get("type") == "host_dispatch_group"]
        return KernelProfile("IREE HAL profiling (iree-benchmark-module + iree-profile dispatch)", runs, wall,
                             per_call(rows, runs),
                             note="host-execution time per dispatch (the CPU is the device); the VM's own calls are not listed")


def _tool(name: str) -> str:
    import shutil
    import sys

    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else (shutil.which(name) or name)


def _dispatch_rows(bundle: Path) -> list[dict[str, Any]]:
    """``iree-profile dispatch --format=jsonl``: one row per executable function."""
    import json
    import subprocess

    proc = subprocess.run([_tool("iree-profile"), "dispatch", "--format=jsonl", str(bundle)],
                          capture_output=True, text=True, timeout=300, check=True)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip().startswith("{")]


def _driver(ctx: CompileContext) -> str:
    if ctx.device == "cuda":
        return "cuda"
    return "local-sync" if ctx.threads == 1 else "local-task"


_CONFIGS: dict[str, Any] = {}


def _shared_config(driver: str, threads: int):
    """One IREE device per process: every module loaded here (one per shape in the
    dynamic-shape experiment) shares its workers, instead of each adding its own pool."""
    import iree.runtime as rt

    if driver not in _CONFIGS:
        if driver == "local-task":
            # Exactly one worker per thread of the run, like every other backend.
            # (--task_topology_max_group_count only caps IREE's physical-core topology,
            # which can give fewer workers than threads on SMT siblings.)
            rt.flags.parse_flags(f"--task_topology_group_count={threads}")
        _CONFIGS[driver] = rt.Config(driver)
    return _CONFIGS[driver]


def iree_worker_threads() -> int | None:
    """IREE's task workers alive in this process, counted by the names IREE's runtime
    gives their threads (``iree-worker-N``): the worker count as IREE itself set it up."""
    try:
        names = [(task / "comm").read_text().strip() for task in Path("/proc/self/task").iterdir()]
    except OSError:
        return None
    return sum(name.startswith("iree-worker") for name in names)


def _cuda_archs(ctx: CompileContext) -> list[str]:
    """The GPU's own arch first (or ``--cuda-arch``), then older ones that compile."""
    wanted = cuda_arch(ctx)
    fallbacks = [a for a in IreeBackend.CUDA_FALLBACKS if int(a[3:]) < int(wanted[3:])]
    return [wanted] + fallbacks
