"""transformers' own exporters (``transformers.exporters``, since 5.13) as an export path:
the model a zoo or ``hf:`` workload built, exported from the transformers model itself with
the keyword inputs the workload calls it with, as a user of transformers would export it.

Only a transformers model called by keyword has that path; any other module (a survey
graph, timm, torchvision, a saved program) keeps the backend's own exporter, and the cell
says why (``hf_call`` returns the reason)."""
from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any, Sequence

ONNX_PATH = "transformers.exporters.OnnxExporter"


def hf_call(module: Any, example_inputs: Sequence[Any]) -> tuple[Any, dict[str, Any], str] | str:
    """(transformers model, its keyword inputs, the output the workload returns) for a module
    built by the zoo's ``Called``; else the reason the module has no such path."""
    model, names = getattr(module, "model", None), getattr(module, "names", None)
    if model is None or names is None:
        return f"{type(model if model is not None else module).__name__} is not a transformers model called by keyword"
    # a transformers model is already imported where one was built: ask for no new import
    if not any(f"{k.__module__}.{k.__name__}" == "transformers.modeling_utils.PreTrainedModel" for k in type(model).__mro__):
        return f"{type(model).__name__} is not a transformers model"
    if not getattr(module, "output", None):
        return "the workload returns the model's whole output, not one named tensor"
    return model, {**dict(zip(names, example_inputs)), **module.extra}, module.output


def export_onnx(call: tuple[Any, dict[str, Any], str], model_path: Path, opset: int, fusions: str | None) -> str:
    """Write ``model_path`` through transformers' ``OnnxExporter`` (onnxscript's optimizer on,
    ORT's fusions for ``fusions``) from ``hf_call``'s answer, its graph's outputs cut to the
    one the workload returns (the rest, such as BERT's pooler, would be work no other backend
    does). Returns the path's description."""
    import onnx_ir
    from onnx_ir.passes.common import RemoveUnusedNodesPass
    from transformers.exporters import OnnxConfig, OnnxExporter

    model, inputs, output = call
    config = OnnxConfig(opset_version=opset, ort_fusions=fusions)  # type: ignore[arg-type]
    with contextlib.redirect_stdout(io.StringIO()):  # the exporter's banners stay out of the worker's protocol
        program = OnnxExporter().export(model, inputs, config).program
    outputs = [v for v in program.graph.outputs if v.name == output]
    if not outputs:
        raise ValueError(f"the export has no output {output!r} (it has {[v.name for v in program.graph.outputs]})")
    program.graph.outputs[:] = outputs
    RemoveUnusedNodesPass()(program)
    onnx_ir.save(program, model_path, external_data=f"{model_path.name}.data")
    return f"{ONNX_PATH}(OnnxConfig(opset_version={opset}, ort_fusions={fusions!r}))"
