"""ONNX Runtime: torch.onnx.export (dynamo exporter) -> InferenceSession.

Phases: ``export`` (torch -> .onnx), ``session`` (graph optimization and
kernel selection inside InferenceSession creation), ``first_call``.
"""
from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path
from typing import Any, Sequence

from .base import Backend, Compiled, CompileContext


class OrtCompiled(Compiled):
    def __init__(self, session, input_names: list[str]):
        self._session = session
        self._input_names = input_names
        self._run = session.run

    def prepare(self, inputs: Sequence[Any]) -> Any:
        # Numpy views of the (CPU) tensors: no copy per call, built once outside the timer.
        return {name: t.detach().cpu().numpy() for name, t in zip(self._input_names, inputs)}

    def run(self, prepared: Any) -> Any:
        return self._run(None, prepared)

    def outputs_to_torch(self, outputs: Any) -> list[Any]:
        import torch

        return [torch.from_numpy(o) for o in outputs]


class OrtBackend(Backend):
    name = "ort"
    description = "ONNX Runtime (dynamo ONNX export, CPU execution provider)"
    packages = ("onnxruntime", "onnx", "onnxscript")
    install_hint = "pip install -e '.[ort]'"
    devices = ("cpu",)

    def required_modules(self) -> tuple[str, ...]:
        return ("onnxruntime", "onnx", "onnxscript")

    def compile(self, module: Any, example_inputs: Sequence[Any], ctx: CompileContext) -> Compiled:
        import onnxruntime as ort
        import torch

        model_path = ctx.work_dir / "model.onnx"
        with ctx.phase("export"):
            # The exporter prints progress banners; keep them out of the worker's protocol.
            with contextlib.redirect_stdout(io.StringIO()):
                torch.onnx.export(
                    module,
                    tuple(example_inputs),
                    str(model_path),
                    dynamo=True,
                    external_data=True,
                    opset_version=ctx.options.get("onnx_opset", 18),
                )
        ctx.info["onnx_bytes"] = sum(p.stat().st_size for p in ctx.work_dir.glob("model.onnx*"))

        options = ort.SessionOptions()
        options.intra_op_num_threads = ctx.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # ORT's pool spins after each run by default; timed alternately with eager on
        # few cores, the spinning threads stole eager's cores (eager measured 2-3x
        # slower than alone). Blocking workers keep the comparison fair.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        ctx.info["intra_op_allow_spinning"] = 0
        providers = ["CPUExecutionProvider"]
        with ctx.phase("session"):
            session = ort.InferenceSession(str(model_path), sess_options=options, providers=providers)
        ctx.info["providers"] = session.get_providers()
        input_names = [i.name for i in session.get_inputs()]
        if len(input_names) != len(example_inputs):
            raise RuntimeError(
                f"exported ONNX graph has {len(input_names)} inputs, the workload has {len(example_inputs)}"
            )
        return OrtCompiled(session, input_names)
