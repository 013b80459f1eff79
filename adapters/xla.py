"""XLA:CPU through JAX: torch.export -> torchax -> ``jax.jit`` (weights as constants) -> XLA.

Phases: ``export`` (torch.export, the program TVM, IREE and AOTInductor take),
``convert`` (torchax turns it into a JAX function), ``lower`` (JAX traces it to
StableHLO), ``compile`` (XLA's ``lower().compile()``), ``first_call``.

Threads: XLA sizes its CPU intra-op pool (threads named ``XLAEigen``) from the process's
affinity mask when the CPU client is created, and has no flag for the count. The adapter
narrows the mask to the run's thread count while that client is created, then gives every
thread the process's full mask back: the pool has the run's threads and none is pinned.
The pool's threads are counted while it runs and recorded.

Warm start: JAX's persistent compilation cache, in the cell's store; a hit is what the
cache reports itself (JAX's ``cache_hits`` event) and the entries that were there before.
Shapes: XLA compiles per shape; the dynamic-shape experiment's ``specialize`` strategy is
what it does, and it has no symbolic-shape path here.
"""
from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any, Iterator, Sequence

from .base import (
    Backend,
    BackendUnavailable,
    CacheVerdict,
    CompileContext,
    Compiled,
    CompileResult,
    flatten_outputs,
    process_thread_names,
    target_key,
)
from .libraries import merge
from .profiling import KernelProfile, KernelTime, ProfileUnavailable, categorize, wall_ms_per_call

# XLA:CPU's numerics, stated rather than left to its defaults: no fast math (XLA's default
# too, here made explicit), fp32 matmuls at full precision like eager's "highest".
XLA_FLAGS = ("--xla_cpu_enable_fast_math=false",)
MATMUL_PRECISION = "highest"
CACHE_HITS_EVENT = "/jax/compilation_cache/cache_hits"
POOL_THREAD_NAME = "XLAEigen"


class XlaCompiled(Compiled):
    def __init__(self, executable, hlo_text: str = ""):
        self._executable = executable
        self._hlo_text = hlo_text

    def prepare(self, inputs: Sequence[Any]) -> Any:
        import jax

        # Placed on the CPU device once, outside the timer.
        return [jax.device_put(t.detach().cpu().numpy()) for t in inputs]

    def run(self, prepared: Any) -> Any:
        outputs = self._executable(*prepared)
        for out in flatten_outputs(outputs):
            out.block_until_ready()  # JAX dispatches asynchronously: a call ends when its outputs exist
        return outputs

    def outputs_to_torch(self, outputs: Any) -> list[Any]:
        import numpy as np
        import torch

        return [torch.from_numpy(np.array(out)) for out in flatten_outputs(outputs)]

    def libraries(self, prepared: Any, kinds: set[str]) -> dict[str, str] | None:
        return hlo_libraries(self._hlo_text) if self._hlo_text else None

    def profile(self, prepared: Any, calls: int) -> KernelProfile:
        """The thunks XLA:CPU ran (its fusions, library calls, copies), from JAX's own
        profiler: ``jax.profiler.trace`` writes an XSpace, read back with ProfileData."""
        import tempfile

        import jax

        with tempfile.TemporaryDirectory() as folder:
            self.run(prepared)  # the first traced call of a process pays the profiler's start-up
            with jax.profiler.trace(folder):
                wall_ms = wall_ms_per_call(self.run, prepared, calls, lambda: None)
            planes = list(Path(folder).rglob("*.xplane.pb"))
            if not planes:
                raise ProfileUnavailable("jax.profiler.trace wrote no XSpace (.xplane.pb)")
            events = thunk_events(jax.profiler.ProfileData.from_file(str(planes[0])))
        if not events:
            raise ProfileUnavailable("JAX's trace holds no XLA:CPU thunk events")
        return KernelProfile("jax.profiler (XLA:CPU thunk trace)", calls, wall_ms, kernels_per_call(events, calls),
                             note="one kernel per thunk XLA:CPU ran: its fusions (a __ynn_fusion is a YNNPACK "
                                  "library call), custom calls and copies; the Python dispatch is left out")


class XlaBackend(Backend):
    name = "xla"
    unsupported_op_patterns = (re.compile(r"AssertionError: ((?:aten|transformers)\.[\w.]+)"),)  # torchax: no lowering
    rank = 60
    description = "XLA:CPU through JAX: torch.export -> torchax -> jax.jit, weights as constants"
    reproducer = """\
import jax
from torchax.export import exported_program_to_jax
weights, function = exported_program_to_jax(torch.export.export(model, tuple(inputs)))
print(jax.jit(lambda *xs: function(weights, xs))(*[jax.numpy.asarray(x.numpy()) for x in inputs]))
"""
    packages = ("jax", "jaxlib", "torchax")
    install_hint = "pip install -e '.[xla]'"
    devices = ("cpu",)
    runtime_modules = ("jax", "torchax", "torchax.export")
    int8_unavailable = ("JAX 0.10 / XLA:CPU has no post-training static int8 quantizer (AQT quantizes in training "
                        "code), and torchax lowers no PT2E quantized_decomposed op")

    def required_modules(self) -> tuple[str, ...]:
        return ("jax", "jaxlib", "torchax")

    def available(self, device: str = "cpu") -> tuple[bool, str]:
        if device == "cuda":
            # (no square brackets: the listing's table reads them as markup)
            return False, ("JAX runs XLA on CUDA through its CUDA plugin (jax's cuda13 extra), which dlcompare's "
                           "xla extra does not install; this adapter drives XLA:CPU only")
        return super().available(device)

    def process_env(self, ctx: CompileContext) -> dict[str, str]:
        # XLA reads XLA_FLAGS once, when its backend starts.
        flags = " ".join([os.environ.get("XLA_FLAGS", ""), *XLA_FLAGS]).strip()
        return {"XLA_FLAGS": flags}

    def settings(self, ctx: CompileContext) -> dict[str, Any]:
        return {"xla_flags": list(XLA_FLAGS), "jax_default_matmul_precision": MATMUL_PRECISION,
                "jax_enable_x64": False, "weights": "constants of the jitted function",
                "intra_op_threads": ctx.threads,
                "thread_pool": "XLA's Eigen pool, sized by the affinity mask at client creation: narrowed to the "
                               "run's threads while the client is made, then every thread's mask restored",
                "converter": "torchax.export.exported_program_to_jax",
                "persistent_cache": "JAX compilation cache in the store, with --cache warm"}

    def compile(self, module: Any, example_inputs: Sequence[Any], ctx: CompileContext) -> CompileResult:
        jax = _configured_jax(ctx.threads)
        cache_dir = self._cache_dir(ctx)
        before = _entries(cache_dir)
        with _counted_events(CACHE_HITS_EVENT) as hits:
            executable, hlo_text = self._build(module, example_inputs, ctx, jax)
        ctx.info["hlo"] = hlo_counts(hlo_text)
        ctx.info["xla_pool_threads_observed"] = xla_pool_threads()
        cache = None if cache_dir is None else _verdict(cache_dir, before, _entries(cache_dir), hits[0])
        return CompileResult(XlaCompiled(executable, hlo_text), cache=cache, info=ctx.info)

    def dynamic_session(self, module, example_inputs, dynamic_dims, strategy, ctx):
        if strategy == "symbolic":
            raise BackendUnavailable("XLA compiles one executable per shape (jax.jit specializes on every new "
                                     "shape); there is no symbolic-shape path: see the specialize strategy")
        return super().dynamic_session(module, example_inputs, dynamic_dims, strategy, ctx)

    def _cache_dir(self, ctx: CompileContext) -> Path | None:
        """Warm: JAX's persistent cache folder in the cell's store, keyed like every store."""
        import jax

        if ctx.cache != "warm":
            jax.config.update("jax_enable_compilation_cache", False)
            return None
        folder = ctx.persistent_dir(self.name, target_key(ctx.device, ctx.threads, self.versions())) / "jax-cache"
        folder.mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_enable_compilation_cache", True)
        jax.config.update("jax_compilation_cache_dir", str(folder))
        # Every entry is written: the small graphs here compile in well under JAX's 1 s default.
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
        return folder

    @staticmethod
    def _build(module, example_inputs, ctx: CompileContext, jax):
        import torch
        from torchax.export import exported_program_to_jax

        with ctx.phase("export"):
            exported = torch.export.export(module, tuple(example_inputs))
        with ctx.phase("convert"):
            states, function = exported_program_to_jax(exported)
            # The weights are closed over: XLA sees them as constants, as TVM and IREE bind them.
            jitted = jax.jit(lambda *inputs: function(states, inputs))
        with ctx.phase("lower"):
            shapes = [jax.ShapeDtypeStruct(tuple(t.shape), t.detach().cpu().numpy().dtype) for t in example_inputs]
            lowered = jitted.lower(*shapes)
        with ctx.phase("compile"):
            executable = lowered.compile()
        return executable, executable.as_text() or ""


def _configured_jax(threads: int):
    """jax, with its settings pinned and its CPU client made with ``threads`` pool threads."""
    import jax

    jax.config.update("jax_enable_x64", False)
    jax.config.update("jax_default_matmul_precision", MATMUL_PRECISION)
    _make_cpu_client(jax, threads)
    return jax


def _make_cpu_client(jax, threads: int) -> None:
    """XLA sizes its intra-op pool from the affinity mask (tsl::port::MaxParallelism) when the
    CPU client is made: make it under a mask of ``threads`` CPUs, then give every thread made
    meanwhile the process's mask back. A client made earlier in the process is kept."""
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        return
    jax.config.update("jax_platforms", "cpu")  # read when the backends are made
    full = os.sched_getaffinity(0)
    existing = _thread_ids()
    os.sched_setaffinity(0, sorted(full)[:max(1, threads)])
    try:
        jax.devices("cpu")
    finally:
        os.sched_setaffinity(0, full)
        for tid in _thread_ids() - existing:
            try:
                os.sched_setaffinity(tid, full)
            except OSError:
                pass  # a thread that ended meanwhile


def _thread_ids() -> set[int]:
    return {int(task.name) for task in Path("/proc/self/task").iterdir()}


def xla_pool_threads() -> int | None:
    """XLA's intra-op pool threads alive in this process, by the name XLA gives them."""
    names = process_thread_names()
    return None if names is None else sum(POOL_THREAD_NAME in name for name in names)


# Trace events of XLA:CPU's threads that mark, rather than run, a thunk.
_THUNK_MARKERS = ("end: ", "ThreadpoolListener", "ThunkExecutor")


def thunk_events(profile_data) -> list[tuple[str, float]]:
    """(thunk name, ms) of every thunk that XLA:CPU's client and Eigen threads ran, from
    the host plane of a JAX XSpace."""
    events = []
    for plane in profile_data.planes:
        for line in plane.lines:
            if not line.name.startswith("tf_XLA"):
                continue
            events += [(e.name, e.duration_ns / 1e6) for e in line.events if not e.name.startswith(_THUNK_MARKERS)]
    return events


def kernels_per_call(events: list[tuple[str, float]], calls: int) -> tuple[KernelTime, ...]:
    """The thunk events grouped by name, per model call."""
    totals: dict[str, list[float]] = {}
    for name, ms in events:
        totals.setdefault(name, []).append(ms)
    return tuple(KernelTime(name, len(times) / calls, sum(times) / calls, thunk_category(name))
                 for name, times in sorted(totals.items(), key=lambda item: -sum(item[1])))


def thunk_category(name: str) -> str:
    """A library fusion (YNNPACK, XNNPACK, oneDNN) and XLA's own dot thunks are matmul/conv."""
    if name.startswith(("ynn_", "xnn_", "onednn_")) or name.split(".")[0].split("_")[0] == "dot":
        return "matmul/conv"
    return categorize(name)


def hlo_counts(hlo_text: str) -> dict[str, int]:
    """Of XLA's optimized HLO: the fusions the entry computation calls (XLA's kernels on CPU),
    and the entry's instructions in all (fusions, custom calls such as a oneDNN or Eigen
    matmul, copies, parameters and constants)."""
    entry = _entry_computation(hlo_text)
    instructions = [line for line in entry if "=" in line and not line.lstrip().startswith("ROOT tuple")]
    return {"entry_instructions": len(instructions),
            "fusions": sum(" fusion(" in line for line in entry),
            "custom_calls": sum(" custom-call(" in line for line in entry),
            "dots_outside_fusions": sum(" dot(" in line or " convolution(" in line for line in entry)}


# XLA:CPU hands some fusions to a library, named in the fusion's backend_config.
LIBRARY_FUSIONS = {"__ynn_fusion": "YNNPACK", "__xnn_fusion": "XNNPACK", "__onednn_fusion": "oneDNN"}
# A dot or convolution left outside such a fusion runs in XLA:CPU's own runtime thunks (Eigen).
XLA_RUNTIME = "XLA:CPU runtime (Eigen)"


def hlo_libraries(hlo_text: str) -> dict[str, str]:
    """Which library each dot and convolution of XLA's optimized HLO runs in: the library of
    the fusion that calls its computation, else XLA:CPU's own runtime."""
    import re

    library_of = {called: LIBRARY_FUSIONS[kind] for called, kind in re.findall(
        r'calls=(%[\w.-]+).*?"kind":"(__\w+_fusion)"', hlo_text) if kind in LIBRARY_FUSIONS}
    found, computation = [], None
    for line in hlo_text.splitlines():
        if line.endswith("{") and not line.startswith(" "):
            computation = line.split()[1] if line.startswith("ENTRY") else line.split()[0]
        for op, kind in ((" dot(", "gemm"), (" convolution(", "conv")):
            if op in line:
                found.append((kind, library_of.get(computation or "", XLA_RUNTIME)))
    return merge(found)


def _entry_computation(hlo_text: str) -> list[str]:
    lines, inside = [], False
    for line in hlo_text.splitlines():
        if line.startswith("ENTRY "):
            inside = True
        elif inside and line.startswith("}"):
            break
        elif inside:
            lines.append(line)
    return lines


@contextlib.contextmanager
def _counted_events(name: str) -> Iterator[list[int]]:
    """How often JAX records the monitoring event ``name`` inside the block (a one-element list)."""
    from jax import monitoring

    counter = [0]

    def listener(event: str, **kwargs: Any) -> None:
        if event == name:
            counter[0] += 1

    monitoring.register_event_listener(listener)
    try:
        yield counter
    finally:
        monitoring.unregister_event_listener(listener)


def _entries(folder: Path | None) -> list[str]:
    if folder is None:
        return []
    return sorted(p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))


def _verdict(folder: Path, before: list[str], after: list[str], hits: int) -> CacheVerdict:
    """A hit when JAX's cache said so and found an entry that was there before this compile."""
    evidence = {"cache_dir": str(folder), "entries_before": len(before), "entries_after": len(after),
                "jax_cache_hit_events": hits}
    return CacheVerdict("hit" if hits > 0 and before and set(before) == set(after) else "miss", evidence)
