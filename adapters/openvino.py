"""OpenVINO (Intel's inference toolkit), CPU plugin: ``openvino.convert_model`` ->
``Core.compile_model(model, "CPU", config)``.

Configured as OpenVINO's performance guide advises for one stream of latency-bound
inference: the LATENCY performance hint, one stream, ``INFERENCE_NUM_THREADS`` = the
run's threads, and the inference precision pinned to the cell's (f32 for fp32 cells:
left alone, the CPU plugin picks bf16 on hardware that has it). Input shapes are fixed
to the cell's (convert_model leaves them dynamic). Phases: ``convert``, ``compile``,
``first_call``. ``--cache warm`` keeps the converted IR in the store and compiles it with
OpenVINO's own model cache (``CACHE_DIR``): a hit is what the compiled model reports as
``LOADED_FROM_CACHE``.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime
from typing import Any, Sequence

from . import artifacts
from .base import Backend, BackendUnavailable, CacheVerdict, CompileContext, Compiled, CompileResult, DelegatingSession
from .profiling import KernelProfile, categorize, per_call, wall_ms_per_call

IR = "model.xml"
PRECISION_HINTS = {"fp32": ("f32", "FP32"), "bf16": ("bf16", "BF16"), "fp16": ("f16", "FP16")}  # hint, capability


class OpenVinoCompiled(Compiled):
    """One infer request, its inputs set once outside the timer; ``run`` is ``infer()``."""

    def __init__(self, compiled_model, out_dtype, profiling_model=None):
        self._request = compiled_model.create_infer_request()
        self._outputs = len(compiled_model.outputs)
        self._out_dtype = out_dtype  # the cell's precision: reduced cells compute at the hint, fp32 at the edges
        self._profiling_model = profiling_model  # () -> the same model compiled with PERF_COUNT

    def prepare(self, inputs: Sequence[Any]) -> Any:
        return set_inputs(self._request, inputs)

    def run(self, prepared: Any) -> Any:
        self._request.infer()
        return self._request

    def outputs_to_torch(self, outputs: Any) -> list[Any]:
        import torch

        return [torch.from_numpy(outputs.get_output_tensor(i).data.copy()).to(self._out_dtype)
                for i in range(self._outputs)]

    def profile(self, prepared: Any, calls: int) -> KernelProfile:
        """OpenVINO's per-layer performance counters (PERF_COUNT) on a twin compiled model."""
        request = self._profiling_model().create_infer_request()
        rows: list[tuple[str, int, float, tuple[str, ...]]] = []
        set_inputs(request, prepared)
        request.infer()  # warm-up, left out

        def one_call(_):
            request.infer()
            rows.extend((f"{p.node_type}:{p.node_name}", 1, _ms(p.real_time), (p.node_type, p.exec_type))
                        for p in request.profiling_info if str(p.status).endswith("EXECUTED"))

        wall = wall_ms_per_call(one_call, None, calls, lambda: None)
        # A layer keeps the name of the source op it grew from (a fused Subgraph may be
        # named after a transpose): its kind comes from its type and kernel alone.
        kernels = tuple(dataclasses.replace(k, category=layer_category(*k.ops)) for k in per_call(rows, calls))
        return KernelProfile("openvino performance counters (PERF_COUNT)", calls, wall, kernels,
                             note="layers as the CPU plugin ran them after its fusions (Subgraph: its Snippets-"
                                  "generated fused kernels); exec_type names the kernel")


def set_inputs(request, inputs: Sequence[Any]) -> Any:
    """Numpy views of the inputs (fp32 where the cell is reduced: the precision hint
    decides what OpenVINO computes in), bound to the request without a copy."""
    import openvino as ov
    import torch

    arrays = [(t.float() if t.is_floating_point() else t).detach().cpu().contiguous().numpy()
              if isinstance(t, torch.Tensor) else t for t in inputs]
    for index, array in enumerate(arrays):
        request.set_input_tensor(index, ov.Tensor(array, shared_memory=True))
    return arrays


# The CPU plugin's layer types whose names the shared patterns do not know.
LAYER_CATEGORIES = {"FullyConnected": "matmul/conv", "MVN": "reduction/norm", "RMS": "reduction/norm",
                    "NormalizeL2": "reduction/norm", "Reorder": "data movement", "Broadcast": "data movement",
                    "StridedSlice": "data movement", "ScaledDotProductAttention": "matmul/conv"}


def layer_category(node_type: str, exec_type: str = "") -> str:
    return LAYER_CATEGORIES.get(node_type) or categorize(f"{node_type} {exec_type}")


def _ms(delta: datetime.timedelta) -> float:
    return delta.total_seconds() * 1e3


class OpenVinoBackend(Backend):
    name = "openvino"
    rank = 25
    description = "OpenVINO CPU plugin (convert_model from torch, LATENCY hint, precision pinned)"
    packages = ("openvino",)
    install_hint = "pip install -e '.[openvino]'"
    devices = ("cpu",)
    runtime_modules = ("openvino",)

    def required_modules(self) -> tuple[str, ...]:
        return ("openvino",)

    def process_env(self, ctx: CompileContext) -> dict[str, str]:
        # OpenVINO's TBB loads its hwloc binding (libtbbbind) with RTLD_DEEPBIND, so hwloc
        # frees with glibc's free what a preloaded tcmalloc or jemalloc allocated: compile_model
        # aborted ("free(): invalid pointer", traced with gdb to hwloc_topology_load). TBB
        # skips DEEPBIND when TBB_ENABLE_SANITIZERS is set, and then runs under every allocator.
        return {"TBB_ENABLE_SANITIZERS": "1"}

    def config(self, ctx: CompileContext, dtype: str) -> dict[str, Any]:
        return {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1, "INFERENCE_NUM_THREADS": ctx.threads,
                "INFERENCE_PRECISION_HINT": PRECISION_HINTS[dtype][0]}

    def settings(self, ctx: CompileContext) -> dict[str, Any]:
        return {**self.config(ctx, "fp32"), "INFERENCE_PRECISION_HINT": "the cell's: f32, bf16 or f16",
                "frontend": "openvino.convert_model(nn.Module, example_input)", "input shapes": "static (the cell's)",
                "device": "CPU", "CACHE_DIR": "the store's, with --cache warm", **self.process_env(ctx)}

    def compile(self, module: Any, example_inputs: Sequence[Any], ctx: CompileContext) -> CompileResult:
        import openvino as ov

        core = ov.Core()
        dtype, out_dtype = cell_precision(module, example_inputs)
        config = self.config(ctx, check_precision(core, dtype))
        warm = ctx.cache == "warm"
        folder, expected = artifacts.store_for(self, ctx)
        with artifacts.locked(folder) if warm else contextlib.nullcontext():
            stored = warm and artifacts.is_valid(folder, expected)
            model = None if stored else self._convert(ov, module, example_inputs, ctx, dtype, static=True)
            if warm and not stored:
                ov.save_model(model, str(folder / IR), compress_to_fp16=False)
                artifacts.write_meta(folder, [IR, "model.bin"], expected)
            ctx.phases.setdefault("convert", 0.0)
            cache_config = dict(config, CACHE_DIR=str(folder / "ov_cache")) if warm else config
            with ctx.phase("compile"):
                compiled = core.compile_model(str(folder / IR) if warm else model, "CPU", cache_config)
        ctx.info.update(self._observed(compiled))
        verdict = None
        if warm:
            hit = bool(compiled.get_property("LOADED_FROM_CACHE"))
            evidence = dict(artifacts.evidence(folder, stored), loaded_from_cache=hit,
                            cache_blobs=sorted(p.name for p in (folder / "ov_cache").glob("*.blob")))
            verdict = CacheVerdict("hit" if hit else "miss", evidence)
        twin = lambda: core.compile_model(str(folder / IR) if warm else model, "CPU", dict(config, PERF_COUNT=True))  # noqa: E731
        return CompileResult(OpenVinoCompiled(compiled, out_dtype, twin), cache=verdict, info=ctx.info)

    def dynamic_session(self, module, example_inputs, dynamic_dims, strategy, ctx):
        if strategy != "symbolic":
            return super().dynamic_session(module, example_inputs, dynamic_dims, strategy, ctx)
        import openvino as ov

        core = ov.Core()
        dtype, out_dtype = cell_precision(module, example_inputs)
        model = self._convert(ov, module, example_inputs, ctx, dtype, static=False,
                             dynamic_dims=dynamic_dims)
        with ctx.phase("compile"):
            compiled = core.compile_model(model, "CPU", self.config(ctx, check_precision(core, dtype)))
        return DelegatingSession(self, OpenVinoCompiled(compiled, out_dtype))

    @staticmethod
    def _convert(ov, module, example_inputs, ctx: CompileContext, dtype: str, static: bool, dynamic_dims=()):
        """convert_model on an fp32 copy (a reduced cell computes at the precision hint), its
        input shapes the cell's, with the dynamic experiment's dims left open."""
        import torch

        fp32 = copy.deepcopy(module).float() if dtype != "fp32" else module
        inputs = tuple(t.float() if t.is_floating_point() else t for t in example_inputs)
        with ctx.phase("convert"), torch.no_grad():
            model = ov.convert_model(fp32, example_input=inputs)
            shapes = []
            for index, tensor in enumerate(inputs):
                dims = dict(dynamic_dims[index]) if index < len(dynamic_dims) else {}
                shapes.append(ov.PartialShape([-1 if (not static and (d in dims or str(d) in dims)) else size
                                               for d, size in enumerate(tensor.shape)]))
            model.reshape({model.inputs[i]: shape for i, shape in enumerate(shapes)})
        return model

    @staticmethod
    def _observed(compiled) -> dict[str, Any]:
        """What the compiled model says it runs with (OpenVINO's own properties)."""
        names = ("PERFORMANCE_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS", "INFERENCE_PRECISION_HINT",
                 "ENABLE_CPU_PINNING", "ENABLE_HYPER_THREADING", "SCHEDULING_CORE_TYPE", "EXECUTION_MODE_HINT")
        observed = {}
        for name in names:
            with contextlib.suppress(Exception):  # a property this version does not have
                observed[name] = str(compiled.get_property(name))
        return {"openvino_properties": observed}


def cell_precision(module, example_inputs) -> tuple[str, Any]:
    """The cell's precision, from its floating inputs or weights: (name, torch dtype)."""
    import torch

    floating = [t for t in list(example_inputs) + list(module.parameters()) if t.is_floating_point()]
    dtype = floating[0].dtype if floating else torch.float32
    name = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "fp32")
    return name, dtype


def check_precision(core, dtype: str) -> str:
    """The precision, if the CPU plugin offers it here; else unavailable, in OpenVINO's words."""
    hint, capability = PRECISION_HINTS[dtype]
    capabilities = list(core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    if capability not in capabilities:
        raise BackendUnavailable(f"OpenVINO's CPU plugin offers {', '.join(capabilities)} on this CPU, not {capability} "
                                 f"(OPTIMIZATION_CAPABILITIES): no {hint} inference here")
    return dtype


class OpenVinoDynamoBackend(OpenVinoBackend):
    """OpenVINO as a ``torch.compile`` backend (``backend="openvino"``, from
    ``openvino.torch``): dynamo captures the graph, OpenVINO compiles what it supports
    and the rest stays in PyTorch. Same CPU configuration as ``openvino``; it compiles on
    the first call, and keeps no store of its own between runs here."""

    name = "openvino-dynamo"
    rank = 26
    description = "OpenVINO as a torch.compile backend (backend='openvino'), same CPU configuration"
    runtime_modules = ("openvino", "openvino.torch", "torch._dynamo")

    def settings(self, ctx: CompileContext) -> dict[str, Any]:
        return {**super().settings(ctx), "frontend": "torch.compile(backend='openvino')", "CACHE_DIR": "none"}

    def compile(self, module: Any, example_inputs: Sequence[Any], ctx: CompileContext) -> CompileResult:
        import openvino as ov
        import openvino.torch  # noqa: F401  (registers backend="openvino")
        import torch

        from .eager import TorchCompiled

        dtype, _ = cell_precision(module, example_inputs)
        options = {"device": "CPU", "config": self.config(ctx, check_precision(ov.Core(), dtype))}
        compiled = torch.compile(module, backend="openvino", options=options)
        with ctx.phase("compile"), torch.no_grad():
            compiled(*example_inputs)  # torch.compile compiles on the first call
        ctx.info["openvino_options"] = options
        return CompileResult(TorchCompiled(compiled, ctx.device), info=ctx.info, includes_first_call=True)
