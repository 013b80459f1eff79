"""ONNX Runtime: torch.onnx.export (dynamo exporter) -> InferenceSession.

Phases: ``export`` (torch -> .onnx), ``session`` (graph optimization and
kernel selection inside InferenceSession creation), ``first_call``. With
``--cache warm`` the optimized model is saved under the store and a later run
loads it with graph optimizations off (export 0, a cheaper session).

``--scenario offline`` builds S sessions of the same model (S = ``--ort-offline-streams``,
default the run's threads), the run's threads split over their intra-op pools, and keeps
one request in flight on each from its own Python thread (ORT's ``run`` releases the GIL
and its threading guide sizes intra-op threads per session): several streams at the same
total threads.
"""
from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from . import artifacts
from .base import (
    Backend,
    BackendOptions,
    CacheVerdict,
    CompileContext,
    Compiled,
    CompileResult,
    DelegatingSession,
    StreamPool,
    StreamSetting,
    export_dynamic_shapes,
    has_vnni,
    option,
)
from .profiling import (
    CrossCheck,
    KernelProfile,
    ProfileUnavailable,
    onnxruntime_profile,
    ort_benchmark_helper,
    wall_ms_per_call,
)

OPTIMIZED = "optimized.onnx"
# --ort-exporter: the export path each choice takes, as the cell's settings name it
EXPORTERS = {"torch": "torch.onnx.export(dynamo=True)",
             "transformers": "transformers.exporters.OnnxExporter (onnxscript optimizer, ORT CPU fusions)"}


class OrtCompiled(Compiled):
    def __init__(self, session, input_names: list[str], profiling_session=None, op_types: frozenset[str] = frozenset(),
                 stream_sessions: list | None = None):
        self._session = session
        # --scenario offline: every stream's session, this one first (None: not built for it)
        self._stream_sessions = stream_sessions
        self._op_types = op_types  # the ONNX graph's op types (its local functions' too)
        self._input_names = input_names
        self._run = session.run
        self._profiling_session = profiling_session  # () -> a new session that profiles itself

    def profile(self, prepared: Any, calls: int) -> KernelProfile:
        if self._profiling_session is None:
            raise ProfileUnavailable("this ORT session was built without a profiling twin")
        session = self._profiling_session()
        session.run(None, prepared)  # ORT's warm-up run, left out of the profile
        wall = wall_ms_per_call(lambda feed: session.run(None, feed), prepared, calls, lambda: None)
        return onnxruntime_profile(session.end_profiling(), calls, wall)

    def libraries(self, prepared: Any, kinds: set[str]) -> dict[str, str] | None:
        from .libraries import from_onnx_ops

        # the CPU EP's MatMul, Gemm and Conv kernels are MLAS (no oneDNN EP in this build)
        return from_onnx_ops(self._op_types) if "CPUExecutionProvider" == self._session.get_providers()[0] else None

    def crosscheck(self, prepared: Any, seconds: float) -> CrossCheck:
        return ort_benchmark_helper(self._session, prepared, seconds)

    def stream_pool(self, prepared: Any) -> StreamPool | None:
        return OrtStreamPool(self._stream_sessions, prepared) if self._stream_sessions else None

    def prepare(self, inputs: Sequence[Any]) -> Any:
        # Numpy views of the (CPU) tensors: no copy per call, built once outside the timer.
        return {name: t.detach().cpu().numpy() for name, t in zip(self._input_names, inputs)}

    def run(self, prepared: Any) -> Any:
        return self._run(None, prepared)

    def outputs_to_torch(self, outputs: Any) -> list[Any]:
        import torch

        return [torch.from_numpy(o) for o in outputs]


class OrtStreamPool(StreamPool):
    """One Python thread per session, each with one request in flight, taking the next
    request as soon as its last one returned, until ``requests`` have run."""

    def __init__(self, sessions: list, feed: Any):
        from concurrent.futures import ThreadPoolExecutor

        self._sessions = sessions
        self._feed = feed
        self._threads = [s.get_session_options().intra_op_num_threads for s in sessions]
        self._executor = ThreadPoolExecutor(max_workers=len(sessions), thread_name_prefix="ort-stream")

    def run_requests(self, requests: int) -> None:
        import threading

        left, lock = [requests], threading.Lock()

        def stream(run) -> None:
            while True:
                with lock:
                    if left[0] == 0:
                        return
                    left[0] -= 1
                run(None, self._feed)

        for future in [self._executor.submit(stream, s.run) for s in self._sessions]:
            future.result()

    def setting(self) -> StreamSetting:
        threads = self._threads[0] if len(set(self._threads)) == 1 else None
        return StreamSetting(streams=len(self._sessions), requests_in_flight=len(self._sessions),
                             threads_per_stream=threads,
                             source=f"dlcompare's choice: {len(self._sessions)} ORT sessions with intra_op_num_threads "
                                    f"{'+'.join(map(str, self._threads))}, one Python thread each")


class OrtCudaCompiled(OrtCompiled):
    """CUDA EP with IO binding: inputs and outputs stay on the GPU, no copy is timed."""

    def prepare(self, inputs: Sequence[Any]) -> Any:
        import onnxruntime as ort

        binding = self._session.io_binding()
        self._keep = []
        for name, t in zip(self._input_names, inputs):
            value = ort.OrtValue.ortvalue_from_numpy(t.detach().cpu().numpy(), "cuda", 0)
            self._keep.append(value)
            binding.bind_ortvalue_input(name, value)
        for out in self._session.get_outputs():
            binding.bind_output(out.name, "cuda")
        return binding

    def run(self, prepared: Any) -> Any:
        self._session.run_with_iobinding(prepared)
        return prepared

    def profile(self, prepared: Any, calls: int) -> KernelProfile:
        raise ProfileUnavailable("ORT's CUDA sessions are not profiled yet")

    def crosscheck(self, prepared: Any, seconds: float) -> CrossCheck:
        raise ProfileUnavailable("ORT's CUDA sessions are not cross-checked yet")

    def synchronize(self) -> None:
        pass  # run_with_iobinding returns after the outputs are ready

    def outputs_to_torch(self, outputs: Any) -> list[Any]:
        import torch

        return [torch.from_numpy(o) for o in outputs.copy_outputs_to_cpu()]


# Said in every cell that runs with ORT's spinning off (its default is on).
SPINNING_DEVIATION = ("session.intra_op.allow_spinning 0, against ORT's default 1: by A/B on the five graphs, "
                      "spinning left ORT's own latency unchanged (within 5 %) and slowed the eager timed beside it "
                      "1.7-2.1x (docs/results/2026-12-01-xeon-backend-configs.md); --ort-spinning on restores it")


@dataclass(frozen=True)
class OrtOptions(BackendOptions):
    # 20, not the exporter's 18, by A/B (docs/results/2026-12-01-xeon-backend-configs.md): its native
    # Gelu took norm_residual from 0.50x to 0.76x of eager; conv, mlp, attention unchanged.
    onnx_opset: int = option(20, "the ONNX exporter's opset (default 20: a native Gelu; 18 decomposes it)",
                             flag="onnx-opset",
                             kind="positive_int", metavar="N")
    ort_spinning: bool = option(False, "session.intra_op.allow_spinning: ORT's default is on; off here (default) "
                                "because its spinning pool slowed eager, timed alternately, 2-3x on 2 cores",
                                flag="ort-spinning", kind="switch")
    ort_exporter: str = option("torch", "how a transformers model reaches ONNX: torch (default: torch.onnx.export, "
                               "dynamo, as for every model) or transformers (transformers.exporters.OnnxExporter "
                               "with onnxscript's optimizer and ORT's CPU fusions, as transformers exports it); "
                               "other models keep torch's and say so", flag="ort-exporter",
                               choices=("torch", "transformers"))
    ort_offline_streams: int = option(0, "--scenario offline: ORT sessions run in parallel, the threads split "
                                      "over them (default 0: one per thread)", flag="ort-offline-streams",
                                      metavar="S")


class OrtBackend(Backend):
    name = "ort"
    tf32_math = True
    rank = 20
    description = "ONNX Runtime (dynamo ONNX export, CPU execution provider)"
    reproducer = """\
import onnxruntime as ort
torch.onnx.export(model, tuple(inputs), 'model.onnx', dynamo=True)
session = ort.InferenceSession('model.onnx')
print(session.run(None, {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)}))
"""
    packages = ("onnxruntime", "onnxruntime-gpu", "onnx", "onnxscript")
    optional_packages = ("onnxruntime-gpu",)
    install_hint = "pip install -e '.[ort]'"
    devices = ("cpu", "cuda")
    options_type = OrtOptions

    @classmethod
    def gemm_probe(cls):
        def make(n: int):
            import numpy as np
            import onnxruntime as ort
            import torch
            from onnx import TensorProto, helper

            graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "gemm",
                                      [helper.make_tensor_value_info(x, TensorProto.FLOAT, [n, n]) for x in "ab"],
                                      [helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
            options = ort.SessionOptions()
            options.intra_op_num_threads = torch.get_num_threads()  # the roofline worker's thread count
            session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            feed = {"a": np.random.rand(n, n).astype(np.float32), "b": np.random.rand(n, n).astype(np.float32)}
            return lambda: session.run(None, feed)
        return "MLAS (onnxruntime MatMul)", make
    runtime_modules = ("onnxruntime", "onnx", "onnxscript", "torch.onnx._internal.exporter._core")

    onnx_frontend = "InferenceSession on the file"
    quantizes = True  # int8: onnxruntime.quantization.quantize_static on the fp32 export (quantize_settings)

    def weight_only_recipe(self, bits: int) -> dict[str, Any] | None:
        from .weight_only import ort_recipe

        return ort_recipe(bits)

    def settings(self, ctx: CompileContext) -> dict[str, Any]:
        spinning = getattr(ctx.options, "ort_spinning", False)
        return {**session_config(ctx), **offline_sessions(ctx), "enable_cpu_mem_arena": True, "providers": self.providers(ctx),
                "onnx_opset": ctx.options.onnx_opset, "exporter": EXPORTERS[ctx.options.ort_exporter],
                **({} if spinning else {"guide_deviation": SPINNING_DEVIATION}),
                **({"quantizer": quantize_settings()} if ctx.calibration else {})}

    def required_modules(self) -> tuple[str, ...]:
        return ("onnxruntime", "onnx", "onnxscript")

    def available(self, device: str = "cpu") -> tuple[bool, str]:
        ok, reason = super().available(device)
        if ok and device == "cuda":
            import onnxruntime as ort

            if "CUDAExecutionProvider" not in ort.get_available_providers():
                return False, ("this onnxruntime has no CUDAExecutionProvider "
                               f"(has: {', '.join(ort.get_available_providers())}); install onnxruntime-gpu")
        return ok, reason

    @staticmethod
    def providers(ctx: CompileContext) -> list[Any]:
        """The session's providers; on CUDA, TF32 stated both ways (the CUDA EP takes TF32 for
        fp32 matmuls and convolutions unless ``use_tf32`` is 0), so fp32 is IEEE fp32."""
        if ctx.device != "cuda":
            return ["CPUExecutionProvider"]
        return [("CUDAExecutionProvider", {"use_tf32": "1" if ctx.tf32 else "0"}), "CPUExecutionProvider"]

    def compile(self, module: Any, example_inputs: Sequence[Any], ctx: CompileContext) -> CompileResult:
        import onnxruntime as ort

        warm = ctx.cache == "warm"
        folder, expected = artifacts.store_for(self, ctx)
        expected["onnx_opset"] = ctx.options.onnx_opset  # a model exported at another opset is not this one
        expected["exporter"] = ctx.options.ort_exporter
        # Warm: hold the store folder's lock from the hit check to the loaded session.
        with artifacts.locked(folder) if warm else contextlib.nullcontext():
            optimized = folder / OPTIMIZED
            hit = warm and artifacts.is_valid(folder, expected)
            threads = stream_threads(ctx)
            options = self._session_options(ort, ctx, threads[0])
            if hit:
                # The stored model is already optimized for this CPU: load it as is.
                ctx.phases["export"] = 0.0
                options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
                model_path = optimized
            else:
                model_path = folder / "model.onnx"
                self._export(module, example_inputs, ctx, model_path)
                if ctx.calibration is not None:
                    model_path = quantize_onnx(model_path, ctx)
                if ctx.weight_bits is not None:
                    from .weight_only import ort_matmul_nbits

                    with ctx.phase("quantize"):
                        model_path = ort_matmul_nbits(model_path, ctx.weight_bits)
                if warm:
                    options.optimized_model_filepath = str(optimized)
            with ctx.phase("session"):
                session = ort.InferenceSession(str(model_path), sess_options=options, providers=self.providers(ctx))
                streams = self._stream_sessions(ort, ctx, session, model_path, threads, hit)
            if warm and not hit:
                artifacts.write_meta(folder, [OPTIMIZED], expected)
        cache = CacheVerdict("hit" if hit else "miss", artifacts.evidence(folder, hit) if warm else {})
        # The providers the session actually kept: a CUDA request that fell back to CPU shows here.
        ctx.info["providers"] = session.get_providers()
        if ctx.device == "cuda" and "CUDAExecutionProvider" not in session.get_providers():
            ctx.info["provider_fallback"] = "CUDAExecutionProvider was requested but not used; ran on CPU"
        input_names = [i.name for i in session.get_inputs()]
        if len(input_names) != len(example_inputs):
            raise RuntimeError(
                f"exported ONNX graph has {len(input_names)} inputs, the workload has {len(example_inputs)}"
            )
        if ctx.calibration is not None:  # untimed: a second session that writes its optimized graph
            ctx.info["int8_ops"] = int8_op_counts(ort, model_path, self._session_options(ort, ctx), ctx, hit)
        compiled = (OrtCudaCompiled if ctx.device == "cuda" else OrtCompiled)(
            session, input_names, lambda: self._profiling_session(ort, model_path, options, ctx), onnx_op_types(model_path),
            stream_sessions=streams)
        return CompileResult(compiled, cache=cache, info=ctx.info)

    def dynamic_session(self, module, example_inputs, dynamic_dims, strategy, ctx):
        if strategy != "symbolic":
            return super().dynamic_session(module, example_inputs, dynamic_dims, strategy, ctx)
        import onnxruntime as ort

        model_path = ctx.work_dir / "model.onnx"
        shapes = export_dynamic_shapes(dynamic_dims, ctx.dynamic_max)
        self._export(module, example_inputs, ctx, model_path, shapes)
        with ctx.phase("session"):
            session = ort.InferenceSession(str(model_path), sess_options=self._session_options(ort, ctx),
                                           providers=self.providers(ctx))
        return DelegatingSession(self, OrtCompiled(session, [i.name for i in session.get_inputs()]))

    @staticmethod
    def _export(module, example_inputs, ctx: CompileContext, model_path, dynamic_shapes=None) -> None:
        with ctx.phase("export"):
            OrtBackend._write_onnx(module, example_inputs, ctx, model_path, dynamic_shapes)
        ctx.info["onnx_bytes"] = sum(p.stat().st_size for p in model_path.parent.glob("model.onnx*"))

    @staticmethod
    def _write_onnx(module, example_inputs, ctx: CompileContext, model_path, dynamic_shapes) -> None:
        """``model_path`` from the user's ONNX file, transformers' exporter (``--ort-exporter
        transformers``, where it applies) or torch's dynamo exporter."""
        import torch

        if getattr(module, "onnx_path", None):  # --model onnx:PATH: the user's file is the model
            import onnx

            onnx.save(onnx.load(str(module.onnx_path)), str(model_path), save_as_external_data=True,
                      location=f"{model_path.name}.data")
            ctx.info["frontend"] = "the ONNX file as given"
            return
        if ctx.options.ort_exporter == "transformers":
            from .hf_exporters import export_onnx, hf_call

            call = hf_call(module, example_inputs) if dynamic_shapes is None else "not used for dynamic shapes"
            if not isinstance(call, str):
                ctx.info["exporter"] = export_onnx(call, model_path, ctx.options.onnx_opset,
                                                   "cuda" if ctx.device == "cuda" else "cpu")
                return
            ctx.info["exporter"] = f"{EXPORTERS['torch']}: --ort-exporter transformers does not apply ({call})"
        # The exporter prints progress banners; keep them out of the worker's protocol.
        with contextlib.redirect_stdout(io.StringIO()):
            torch.onnx.export(
                module,
                tuple(example_inputs),
                str(model_path),
                dynamo=True,
                external_data=True,
                opset_version=ctx.options.onnx_opset,
                dynamic_shapes=dynamic_shapes,
            )

    def _stream_sessions(self, ort, ctx: CompileContext, first, model_path, threads: list[int], hit: bool):
        """--scenario offline: ``first`` and one more session per further stream, each with
        its share of the threads (a stored, optimized model loads unoptimized, as ``first``
        did); None outside the offline scenario."""
        if ctx.scenario != "offline" or ctx.device != "cpu":
            return None
        sessions = [first]
        for count in threads[1:]:
            options = self._session_options(ort, ctx, count)
            if hit:
                options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            sessions.append(ort.InferenceSession(str(model_path), sess_options=options, providers=self.providers(ctx)))
        return sessions

    def _profiling_session(self, ort, model_path, options, ctx: CompileContext):
        """The same model and options, with ORT's own profiler on (never the timed session)."""
        options.enable_profiling = True
        options.profile_file_prefix = str(ctx.work_dir / "ort-profile")
        options.optimized_model_filepath = ""
        return ort.InferenceSession(str(model_path), sess_options=options, providers=self.providers(ctx))

    @staticmethod
    def _session_options(ort, ctx: CompileContext, threads: int | None = None):
        """``session_config`` applied to ORT's SessionOptions: what is recorded is what runs."""
        options = ort.SessionOptions()
        for name, value in session_config(ctx, threads).items():
            if name.startswith("session."):
                options.add_session_config_entry(name, value)
            elif name == "execution_mode":
                options.execution_mode = getattr(ort.ExecutionMode, value)
            elif name == "graph_optimization_level":
                options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, value)
            else:
                setattr(options, name, value)
        return options


def stream_threads(ctx: CompileContext) -> list[int]:
    """Each session's intra-op threads: all the run's for one session; offline (CPU), the
    run's threads split over ``--ort-offline-streams`` sessions (default one per thread)."""
    if ctx.scenario != "offline" or ctx.device != "cpu":
        return [ctx.threads]
    streams = min(getattr(ctx.options, "ort_offline_streams", 0) or ctx.threads, ctx.threads)
    share, extra = divmod(ctx.threads, streams)
    return [share + (1 if i < extra else 0) for i in range(streams)]


def offline_sessions(ctx: CompileContext) -> dict[str, Any]:
    """The sessions' settings, recorded, where the offline scenario splits the threads."""
    threads = stream_threads(ctx)
    if ctx.scenario != "offline" or ctx.device != "cpu":
        return {}
    return {"offline_sessions": len(threads), "intra_op_num_threads": "+".join(map(str, threads)),
            "offline_driver": "one Python thread per session, one request in flight on each"}


def session_config(ctx: CompileContext, threads: int | None = None) -> dict[str, Any]:
    """ORT's performance guide: ORT_ENABLE_ALL graph optimizations, intra-op threads = the
    cores to use, sequential execution for a single-stream graph. Spinning is the one
    setting changed from ORT's default: its pool spins after each run, and timed alternately
    with eager on few cores the spinning threads stole eager's cores (eager 1.7-3x slower
    than alone) while buying ORT nothing measurable (docs/results); --ort-spinning on restores it."""
    spinning = getattr(ctx.options, "ort_spinning", False)
    return {"graph_optimization_level": "ORT_ENABLE_ALL", "intra_op_num_threads": threads or ctx.threads,
            "inter_op_num_threads": 1, "execution_mode": "ORT_SEQUENTIAL",
            "session.intra_op.allow_spinning": "1" if spinning else "0"}


def onnx_op_types(model_path) -> frozenset[str]:
    """The op types of an ONNX file's graph and its local functions (weights not loaded)."""
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    nodes = list(model.graph.node) + [n for f in model.functions for n in f.node]
    return frozenset(n.op_type for n in nodes)



# Ops of ORT's optimized graph that compute in int8 (its QDQ fusions and integer kernels);
# QuantizeLinear / DequantizeLinear only convert.
INT8_OP_PREFIXES = ("QLinear", "QGemm", "QAttention", "QEmbedLayerNormalization", "DynamicQuantize")
INT8_OPS = ("ConvInteger", "MatMulInteger", "MatMulIntegerToFloat", "QOrderedMatMul", "MatMulNBits")
CONVERTERS = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear")
LAYOUT_OPS = ("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Gather", "Slice",
              "Concat", "Expand", "ReorderInput", "ReorderOutput", "Constant", "Cast")


def quantize_settings(vnni: bool | None = None) -> dict[str, Any]:
    """ORT's quantization guide for x86: QDQ, U8S8 (uint8 activations, int8 weights),
    per-channel weights, the model pre-processed first; reduce_range (7-bit weights) only
    on a CPU without VNNI, where the guide says U8S8's VPMADDUBSW may saturate."""
    return {"quantizer": "onnxruntime.quantization.quantize_static", "quant_format": "QDQ",
            "activation_type": "QUInt8", "weight_type": "QInt8", "per_channel": True,
            "reduce_range": not (has_vnni() if vnni is None else vnni), "calibrate_method": "MinMax",
            "pre_process": "onnxruntime.quantization.shape_inference.quant_pre_process"}


def quantize_onnx(model_path: Path, ctx: CompileContext) -> Path:
    """The fp32 export pre-processed and statically quantized (``quantize_settings``) on
    the cell's calibration batches, in a ``quantize`` phase; returns the int8 model."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class CalibrationBatches(CalibrationDataReader):
        """The calibration batches as ORT reads them: one feed per batch."""

        def __init__(self, names: list[str], batches: list):
            self._feeds = iter([{n: t.detach().cpu().numpy() for n, t in zip(names, batch)} for batch in batches])

        def get_next(self):
            return next(self._feeds, None)

    settings = quantize_settings()
    prepared, quantized = model_path.with_name("pre.onnx"), model_path.with_name("model.int8.onnx")
    names = [i.name for i in onnx.load(str(model_path), load_external_data=False).graph.input]
    reader = CalibrationBatches(names, ctx.calibration or [])
    with ctx.phase("quantize"):
        quant_pre_process(str(model_path), str(prepared))
        quantize_static(str(prepared), str(quantized), reader, quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        per_channel=settings["per_channel"], reduce_range=settings["reduce_range"])
    return quantized


def int8_op_counts(ort, model_path: Path, options, ctx: CompileContext, optimized_already: bool) -> dict[str, int]:
    """How many ops of ORT's optimized graph compute in int8 and how many in fp32 (layout
    ops and conversions apart), read from the graph the session writes
    (``optimized_model_filepath``)."""
    import onnx

    path = model_path
    if not optimized_already:
        path = ctx.work_dir / "int8-optimized.onnx"
        options.optimized_model_filepath = str(path)
        ort.InferenceSession(str(model_path), sess_options=options, providers=["CPUExecutionProvider"])
    counts = {"int8": 0, "fp32": 0, "conversions": 0}
    for node in onnx.load(str(path), load_external_data=False).graph.node:
        if node.op_type in INT8_OPS or node.op_type.startswith(INT8_OP_PREFIXES):
            counts["int8"] += 1
        elif node.op_type in CONVERTERS:
            counts["conversions"] += 1
        elif node.op_type not in LAYOUT_OPS:
            counts["fp32"] += 1
    return counts
