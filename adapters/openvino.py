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

``--scenario offline`` compiles with the THROUGHPUT hint instead (OpenVINO's throughput
guide: the hint picks the streams for this model and device, ``INFERENCE_NUM_THREADS``
still caps the threads at the run's) and issues requests through an ``AsyncInferQueue``
of the compiled model's ``OPTIMAL_NUMBER_OF_INFER_REQUESTS``; the streams recorded are
the compiled model's own ``NUM_STREAMS``.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from . import artifacts
from .base import (
    Backend,
    BackendOptions,
    BackendUnavailable,
    CacheVerdict,
    CompileContext,
    Compiled,
    CompileResult,
    DelegatingSession,
    StreamPool,
    StreamSetting,
    has_vnni,
    option,
)
from .profiling import (
    CrossCheck,
    KernelProfile,
    ProfileUnavailable,
    categorize,
    per_call,
    tool_path,
    wall_ms_per_call,
)

IR = "model.xml"
PRECISION_HINTS = {"fp32": ("f32", "FP32"), "bf16": ("bf16", "BF16"), "fp16": ("f16", "FP16")}  # hint, capability


class OpenVinoCompiled(Compiled):
    """One infer request, its inputs set once outside the timer; ``run`` is ``infer()``."""

    def __init__(self, compiled_model, out_dtype, profiling_model=None, tool_args=None, offline: bool = False):
        self._compiled = compiled_model
        self._offline = offline  # compiled for --scenario offline: requests go through an AsyncInferQueue
        self._request = compiled_model.create_infer_request()
        self._outputs = len(compiled_model.outputs)
        self._out_dtype = out_dtype  # the cell's precision: reduced cells compute at the hint, fp32 at the edges
        self._profiling_model = profiling_model  # () -> the same model compiled with PERF_COUNT
        self._tool_args = tool_args  # () -> benchmark_app's arguments for this model (its IR saved)
        self._bound: Any = None  # the arrays the request's inputs are bound to

    def prepare(self, inputs: Sequence[Any]) -> Any:
        self._bound = set_inputs(self._request, inputs)
        return self._bound

    def run(self, prepared: Any) -> Any:
        # The request holds the inputs last prepared: after the numerics' extra draws, the
        # timing inputs are bound again here (an identity test, nothing copied).
        if prepared is not self._bound:
            set_inputs(self._request, prepared)
            self._bound = prepared
        self._request.infer()
        return self._request

    def outputs_to_torch(self, outputs: Any) -> list[Any]:
        import torch

        return [torch.from_numpy(outputs.get_output_tensor(i).data.copy()).to(self._out_dtype)
                for i in range(self._outputs)]

    def stream_pool(self, prepared: Any) -> StreamPool | None:
        return OpenVinoStreamPool(self._compiled, prepared) if self._offline else None

    def libraries(self, prepared: Any, kinds: set[str]) -> dict[str, str] | None:
        from .libraries import from_openvino_layers

        layers = [(op.get_rt_info()["layerType"].astype(str), op.get_rt_info()["primitiveType"].astype(str))
                  for op in self._compiled.get_runtime_model().get_ordered_ops()]
        return from_openvino_layers(layers)

    def crosscheck(self, prepared: Any, seconds: float) -> CrossCheck:
        """OpenVINO's ``benchmark_app`` on this model's IR, with the cell's hint, streams,
        threads, precision and pinning, synchronous calls (as timed here), random inputs."""
        if self._tool_args is None:
            raise ProfileUnavailable("this OpenVINO model has no IR for benchmark_app")
        return benchmark_app([*self._tool_args(), "-t", str(max(1, round(seconds)))])

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


KV_NAMES = ("k_cache", "v_cache")


def make_kv_stateful(model) -> None:
    """The decode step's cache inputs and outputs (inputs 2 and 3, outputs 1 and 2) as
    internal state variables, OpenVINO's MakeStateful transformation, as optimum-intel
    applies it to an LLM's past key/values."""
    from openvino._offline_transformations import apply_make_stateful_transformation

    pairs = {}
    for index, name in enumerate(KV_NAMES):
        model.inputs[2 + index].get_tensor().set_names({name})
        model.outputs[1 + index].get_tensor().set_names({f"{name}_out"})
        pairs[name] = f"{name}_out"
    apply_make_stateful_transformation(model, pairs)


class OpenVinoStatefulStep(Compiled):
    """The decode step with its KV cache inside the infer request's state: a step sends the
    token and its position and gets the logits. At a generation's first step (the prefill's
    caches passed in) the caches are written into the state, inside the clock."""

    def __init__(self, compiled_model, out_dtype):
        import torch

        self._request = compiled_model.create_infer_request()
        self._out_dtype = out_dtype
        self.empty = torch.empty(0)  # the placeholder caches the decode loop passes back

    def prepare(self, inputs: Sequence[Any]) -> Any:
        import openvino as ov

        token, position, k_cache, v_cache = inputs
        if k_cache.numel():
            caches = {"k_cache": k_cache, "v_cache": v_cache}
            for state in self._request.query_state():
                name = next(n for n in KV_NAMES if n in state.name)
                state.state = ov.Tensor(caches[name].float().contiguous().numpy())
        return [token.numpy(), position.numpy()]

    def run(self, prepared: Any) -> Any:
        self._request.infer(prepared)
        return self._request

    def outputs_to_torch(self, outputs: Any) -> list[Any]:
        import torch

        logits = torch.from_numpy(outputs.get_output_tensor(0).data.copy()).to(self._out_dtype)
        return [logits, self.empty, self.empty]


class OpenVinoStreamPool(StreamPool):
    """OpenVINO's throughput application design: an ``AsyncInferQueue`` of as many infer
    requests as the compiled model says is optimal (``OPTIMAL_NUMBER_OF_INFER_REQUESTS``),
    each bound to the same inputs; its streams run them in parallel."""

    def __init__(self, compiled_model, arrays: Any):
        import openvino as ov

        self._in_flight = int(compiled_model.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        self._streams = int(plain_property(compiled_model.get_property("NUM_STREAMS")))
        self._hint = plain_property(compiled_model.get_property("PERFORMANCE_HINT"))
        self._threads = int(compiled_model.get_property("INFERENCE_NUM_THREADS"))
        self._queue = ov.AsyncInferQueue(compiled_model, self._in_flight)
        for index in range(len(self._queue)):
            set_inputs(self._queue[index], arrays)

    def run_requests(self, requests: int) -> None:
        for _ in range(requests):
            self._queue.start_async()  # waits for an idle request when all are busy
        self._queue.wait_all()

    def setting(self) -> StreamSetting:
        return StreamSetting(streams=self._streams, requests_in_flight=self._in_flight, threads_per_stream=None,
                             source=f"OpenVINO's own NUM_STREAMS and OPTIMAL_NUMBER_OF_INFER_REQUESTS under "
                                    f"PERFORMANCE_HINT={self._hint}; it shares INFERENCE_NUM_THREADS="
                                    f"{self._threads} over its streams itself")


def benchmark_app(args: list[str]) -> CrossCheck:
    """Run OpenVINO's ``benchmark_app`` and read its median latency."""
    import re
    import subprocess

    proc = subprocess.run([tool_path("benchmark_app"), *args], capture_output=True, text=True, timeout=600)
    found = re.search(r"Median:\s+([0-9.]+) (ms|us|s)\b", proc.stdout)
    iterations = re.search(r"Count:\s+([0-9]+) iterations", proc.stdout)
    if proc.returncode != 0 or not found:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
        raise ProfileUnavailable(f"benchmark_app failed (exit {proc.returncode}): {tail}")
    scale = {"ms": 1.0, "us": 1e-3, "s": 1e3}[found.group(2)]  # it picks the unit
    return CrossCheck("benchmark_app", float(found.group(1)) * scale, int(iterations.group(1)) if iterations else 0,
                      note="random inputs of the cell's shapes")


def tool_arguments(model_path: Path, config: dict[str, Any], compiled) -> list[str]:
    """benchmark_app's flags for the settings this model was compiled with: its whole
    config as a ``-load_config`` file (its UI refuses -nstreams, -nthreads and -pin beside
    a -hint), the pinning the compiled model reports, synchronous calls."""
    import json

    device = {key: str(value) for key, value in config.items()}
    device["ENABLE_CPU_PINNING"] = "YES" if compiled.get_property("ENABLE_CPU_PINNING") else "NO"
    path = model_path.with_name("benchmark_app_config.json")
    path.write_text(json.dumps({"CPU": device}))
    return ["-m", str(model_path), "-d", "CPU", "-load_config", str(path), "-api", "sync"]


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


@dataclass(frozen=True)
class OpenVinoOptions(BackendOptions):
    # OpenVINO's own default (on for the LATENCY hint on Linux) is kept: each backend pins
    # as its own default does, and every cell records which threads ended up pinned.
    openvino_pinning: str = option("default", "ENABLE_CPU_PINNING: 'default' leaves OpenVINO's (it pins its "
                                   "threads), 'on' or 'off' sets it", flag="openvino-pinning",
                                   choices=("default", "on", "off"))
    openvino_offline_hint: str = option("throughput", "--scenario offline: PERFORMANCE_HINT to compile with "
                                        "('throughput', OpenVINO's advice, picks its streams; 'latency': one "
                                        "stream, for an A/B)", flag="openvino-offline-hint",
                                        choices=("throughput", "latency"))
    openvino_llm_state: str = option("stateful", "decode suite: the KV cache as the decode step's internal state "
                                     "('stateful', as optimum-intel and OpenVINO GenAI make LLMs; the prefill's "
                                     "caches are copied into it once per generation) or as explicit inputs and "
                                     "outputs ('explicit', for an A/B)", flag="openvino-llm-state",
                                     choices=("stateful", "explicit"))


class OpenVinoBackend(Backend):
    name = "openvino"
    unsupported_op_patterns = (re.compile(r"No conversion rule found for operations?: ([\w:.]+)"),)  # its PyTorch frontend
    rank = 25
    description = "OpenVINO CPU plugin (convert_model from torch, LATENCY hint, precision pinned)"
    reproducer = """\
import openvino as ov
converted = ov.convert_model(model, example_input=tuple(inputs))
compiled = ov.compile_model(converted, "CPU")
print(compiled([x.numpy() for x in inputs]))
"""
    packages = ("openvino",)
    onnx_frontend = "openvino.convert_model on the file (its ONNX frontend)"
    install_hint = "pip install -e '.[openvino]'"
    devices = ("cpu",)
    runtime_modules = ("openvino",)
    options_type = OpenVinoOptions

    def required_modules(self) -> tuple[str, ...]:
        return ("openvino",)

    def process_env(self, ctx: CompileContext) -> dict[str, str]:
        # OpenVINO's TBB loads its hwloc binding (libtbbbind) with RTLD_DEEPBIND, so hwloc
        # frees with glibc's free what a preloaded tcmalloc or jemalloc allocated: compile_model
        # aborted ("free(): invalid pointer", traced with gdb to hwloc_topology_load). TBB
        # skips DEEPBIND when TBB_ENABLE_SANITIZERS is set, and then runs under every allocator;
        # its pinning is unchanged (2 threads pinned while it runs, with or without it).
        return {"TBB_ENABLE_SANITIZERS": "1"}

    # --scenario offline: this backend's requests go through an AsyncInferQueue (not openvino-dynamo's)
    offline_streams = True

    def offline(self, ctx: CompileContext) -> bool:
        return self.offline_streams and ctx.scenario == "offline"

    def config(self, ctx: CompileContext, dtype: str) -> dict[str, Any]:
        pinning = getattr(ctx.options, "openvino_pinning", "default")
        hint = getattr(ctx.options, "openvino_offline_hint", "throughput") if self.offline(ctx) else "latency"
        # THROUGHPUT leaves NUM_STREAMS to the hint (the guide: the hint sizes the streams to
        # the model); LATENCY is one stream.
        streams = {} if hint == "throughput" else {"NUM_STREAMS": 1}
        return {"PERFORMANCE_HINT": hint.upper(), **streams, "INFERENCE_NUM_THREADS": ctx.threads,
                "INFERENCE_PRECISION_HINT": PRECISION_HINTS[dtype][0],
                **({"ENABLE_CPU_PINNING": pinning == "on"} if pinning != "default" else {})}

    quantizes = True  # int8: NNCF's post-training quantize on the converted model (NNCF_SETTINGS)
    quantizer_modules = ("nncf",)

    def weight_only_recipe(self, bits: int) -> dict[str, Any] | None:
        from .weight_only import openvino_recipe

        return openvino_recipe(bits)

    def settings(self, ctx: CompileContext) -> dict[str, Any]:
        return {**self.config(ctx, "fp32"), "INFERENCE_PRECISION_HINT": "the cell's: f32, bf16 or f16 (int8: f32 for "
                "the layers NNCF leaves unquantized)",
                "frontend": "openvino.convert_model(nn.Module, example_input)", "input shapes": "static (the cell's)",
                "device": "CPU", "CACHE_DIR": "the store's, with --cache warm", **self.process_env(ctx),
                **({"quantizer": nncf_settings()} if ctx.calibration else {})}

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
            if model is not None and ctx.calibration is not None:
                model = nncf_quantize(model, ctx)
            if model is not None and ctx.weight_bits is not None:
                from .weight_only import openvino_compress

                with ctx.phase("quantize"):
                    model = openvino_compress(model, ctx.weight_bits)
            stateful = self.stateful_step(module, ctx)
            if model is not None and stateful:
                with ctx.phase("make_stateful"):
                    make_kv_stateful(model)
            if warm and not stored:
                ov.save_model(model, str(folder / IR), compress_to_fp16=False)
                artifacts.write_meta(folder, [IR, "model.bin"], expected)
            ctx.phases.setdefault("convert", 0.0)
            cache_config = dict(config, CACHE_DIR=str(folder / "ov_cache")) if warm else config
            with ctx.phase("compile"):
                compiled = core.compile_model(str(folder / IR) if warm else model, "CPU", cache_config)
        ctx.info.update(self._observed(compiled))
        if ctx.calibration is not None:
            ctx.info["int8_ops"] = runtime_precisions(compiled)
        verdict = None
        if warm:
            hit = bool(compiled.get_property("LOADED_FROM_CACHE"))
            evidence = dict(artifacts.evidence(folder, stored), loaded_from_cache=hit,
                            cache_blobs=sorted(p.name for p in (folder / "ov_cache").glob("*.blob")))
            verdict = CacheVerdict("hit" if hit else "miss", evidence)
        twin = lambda: core.compile_model(str(folder / IR) if warm else model, "CPU", dict(config, PERF_COUNT=True))  # noqa: E731

        def tool_args() -> list[str]:
            path = folder / IR
            if not warm:  # the cold cell's model lives in memory: save its IR for the tool
                ov.save_model(model, str(path), compress_to_fp16=False)
            return tool_arguments(path, config, compiled)

        if stateful:
            ctx.info["llm_state"] = "stateful: the KV cache is the decode step's state (MakeStateful)"
            return CompileResult(OpenVinoStatefulStep(compiled, out_dtype), cache=verdict, info=ctx.info)
        return CompileResult(OpenVinoCompiled(compiled, out_dtype, twin, tool_args, offline=self.offline(ctx)),
                             cache=verdict, info=ctx.info)

    def stateful_step(self, module: Any, ctx: CompileContext) -> bool:
        """The decode suite's step of a transformers decoder, with --openvino-llm-state stateful."""
        return (type(module).__name__ == "HFDecodeStep"
                and getattr(ctx.options, "openvino_llm_state", "explicit") == "stateful")

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

        onnx_path = getattr(module, "onnx_path", None)  # --model onnx:PATH: OpenVINO's ONNX frontend
        fp32 = copy.deepcopy(module).float() if dtype != "fp32" and not onnx_path else module
        inputs = tuple(t.float() if t.is_floating_point() else t for t in example_inputs)
        with ctx.phase("convert"), torch.no_grad():
            model = ov.convert_model(str(onnx_path)) if onnx_path else ov.convert_model(fp32, example_input=inputs)
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
        names = ("PERFORMANCE_HINT", "NUM_STREAMS", "OPTIMAL_NUMBER_OF_INFER_REQUESTS", "INFERENCE_NUM_THREADS",
                 "INFERENCE_PRECISION_HINT", "ENABLE_CPU_PINNING", "ENABLE_HYPER_THREADING", "SCHEDULING_CORE_TYPE", "EXECUTION_MODE_HINT")
        observed = {}
        for name in names:
            with contextlib.suppress(Exception):  # a property this version does not have
                observed[name] = plain_property(compiled.get_property(name))
        return {"openvino_properties": observed}


NNCF_SETTINGS = {"quantizer": "nncf.quantize (post-training, OpenVINO IR)", "preset": "PERFORMANCE (symmetric)",
                 "model_type": "TRANSFORMER where the graph has a Softmax (NNCF's advice for transformers), else default",
                 "subset_size": "the calibration batches", "fast_bias_correction": True}


def overflow_fix(vnni: bool | None = None) -> str:
    """NNCF's guard against the saturation of int8 instructions without VNNI: its default,
    first_layer_only, on a VNNI CPU; "enable" (7-bit weights in every Conv and MatMul) on one
    without, as NNCF's OverflowFix advises when the first layer's fix leaves an accuracy drop:
    GPT-2's and ViT's cosine to fp32 rose from 0.88 and 0.75 to 0.996 and 0.994 at --size small
    (scripts/experiments/int8_saturation.py, an AVX2 CPU without VNNI)."""
    return "first_layer_only" if (has_vnni() if vnni is None else vnni) else "enable"


def nncf_settings(vnni: bool | None = None) -> dict[str, Any]:
    return {**NNCF_SETTINGS, "overflow_fix": overflow_fix(vnni), "nncf": _version("nncf")}
# Runtime-model layers that neither compute nor convert precision.
NON_COMPUTE_LAYERS = ("Const", "Input", "Output", "Parameter", "Result")


def _version(dist: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(dist)


def nncf_quantize(model, ctx: CompileContext):
    """The converted model quantized by NNCF on the cell's calibration batches, in a
    ``quantize`` phase (``NNCF_SETTINGS``)."""
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, OverflowFix

    batches = ctx.calibration or []
    transformer = any(op.get_type_name() == "Softmax" for op in model.get_ops())
    extra = {"model_type": nncf.ModelType.TRANSFORMER} if transformer else {}
    dataset = nncf.Dataset(batches, lambda batch: tuple(t.detach().cpu().float().numpy() if t.is_floating_point()
                                                        else t.detach().cpu().numpy() for t in batch))
    with ctx.phase("quantize"):
        quantized = nncf.quantize(model, dataset, subset_size=len(batches), preset=nncf.QuantizationPreset.PERFORMANCE,
                                  advanced_parameters=AdvancedQuantizationParameters(overflow_fix=OverflowFix(overflow_fix())),
                                  **extra)
    ctx.info["nncf_model_type"] = "TRANSFORMER" if transformer else "default"
    return quantized


def runtime_precisions(compiled) -> dict[str, int]:
    """How many layers of the CPU plugin's runtime model execute in int8 (``runtimePrecision``
    i8/u8) and how many in floating point; Reorders (conversions) apart. On AVX-512 the
    plugin may fuse a chain of quantized MatMuls into one snippets ``Subgraph`` whose
    precision is its f32 output: its int8 ops are the low-precision transformations'
    MatMuls inside it, each followed by a ``DequantizationMultiply`` (``int8_fused``)."""
    counts = {"int8": 0, "fp32": 0, "conversions": 0, "int8_fused": 0}
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        layer, precision = info["layerType"].astype(str), info["runtimePrecision"].astype(str).lower()
        if layer in NON_COMPUTE_LAYERS:
            continue
        if layer == "Reorder":
            counts["conversions"] += 1
        elif precision in ("i8", "u8"):
            counts["int8"] += 1
        elif layer == "Subgraph" and (fused := _fused_int8_ops(op, info)):
            counts["int8"] += fused
            counts["int8_fused"] += fused
        else:
            counts["fp32"] += 1
    return counts


def _fused_int8_ops(op, info) -> int:
    """The int8 MatMuls and Convolutions inside a fused layer fed int8 data (0 otherwise)."""
    import openvino as ov

    if not any(op.input(k).get_element_type() in (ov.Type.i8, ov.Type.u8) for k in range(op.get_input_size())):
        return 0
    names = info["originalLayersNames"].astype(str).split(",") if "originalLayersNames" in info else []
    return sum(name.endswith("/DequantizationMultiply") for name in names)


def cell_precision(module, example_inputs) -> tuple[str, Any]:
    """The cell's precision, from its floating inputs or weights: (name, torch dtype)."""
    import torch

    floating = [t for t in list(example_inputs) + list(module.parameters()) if t.is_floating_point()]
    dtype = floating[0].dtype if floating else torch.float32
    name = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "fp32")
    return name, dtype


def plain_property(value: Any) -> Any:
    """An OpenVINO property as plain data: an element type by its short name ("f32",
    "bf16"), one of the plugin's enums by its member name ("ANY_CORE", "PERFORMANCE"),
    numbers and flags as they are (the Python reprs hid "bf16" behind "<Type: 'bfloat16'>")."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if callable(getattr(value, "get_type_name", None)):  # openvino.Type
        return value.get_type_name()
    name = getattr(value, "name", None)  # the plugin's pybind11 enums
    return name if isinstance(name, str) else str(value)


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
    offline_streams = False  # torch.compile's callable: one call at a time, no infer requests of its own
    quantizes = False
    int8_unavailable = ("NNCF quantizes an OpenVINO model or a torch.fx graph before compilation; the torch.compile "
                        "backend takes the fp32 module, and dlcompare measures int8 OpenVINO through `openvino`")
    description = "OpenVINO as a torch.compile backend (backend='openvino'), same CPU configuration"
    onnx_frontend = None  # torch.compile takes torch code only
    runtime_modules = ("openvino", "openvino.torch", "torch._dynamo")

    def weight_only_recipe(self, bits: int) -> dict[str, Any] | None:
        return None  # torch.compile's OpenVINO backend takes no NNCF-compressed model here

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
