"""``--model onnx:PATH``: an ONNX file as users bring it.

Only the backends with an ONNX frontend take it (ONNX Runtime, OpenVINO, TVM Relax, IREE);
the torch-only ones are ``unavailable`` with that reason. The reference is ONNX Runtime
with every graph optimization off: the file as written, run op by op (``build.OnnxFile``).
Symbolic input dims are made concrete once, in a static copy of the file that every
backend reads: the batch dim (the first) at 1 or ``--batch``, any other at ``OTHER_DIM``.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

from ..base import TensorSpec, Workload, WorkloadError, lazy

OTHER_DIM = 128  # a symbolic non-batch dim (a sequence length, most often)
REFERENCE = "onnxruntime with graph optimizations off"
ONNX_DTYPES = {1: "float32", 10: "float16", 16: "bfloat16", 11: "float64", 7: "int64", 6: "int32", 9: "bool"}


def onnx_workload(spec: str, path: Path) -> Workload:
    """The file's graph inputs (names, dtypes, dims), checked now: a bad file is one line."""
    if not path.is_file():
        raise WorkloadError(f"--model {spec}: no such file")
    try:
        import onnx

        model = onnx.load(str(path), load_external_data=False)
    except ImportError:
        raise WorkloadError(f"--model {spec}: the onnx package is not installed (pip install -e '.[ort]')") from None
    except Exception as exc:  # not an ONNX protobuf: the user's input, one line
        raise WorkloadError(f"--model {spec}: onnx.load failed: {str(exc).splitlines()[0][:200]}") from None
    inputs = graph_inputs(spec, model)
    params = {"origin": spec, "path": str(path.resolve()), "batch": 1, "inputs": inputs}
    dims = ", ".join(f"{i['name']} {'x'.join(str(d) for d in i['dims'])} {i['dtype']}" for i in inputs)
    return Workload(name=re.sub(r"[^a-z0-9_]", "_", path.stem.lower()) or "onnx",
                    description=f"ONNX file {path.name} ({dims}); reference: {REFERENCE}",
                    sizes={"default": params}, build=lazy("zoo.build", "build_onnx"), inputs=input_specs,
                    tags=("zoo", "onnx"), source=spec,
                    batch_param="batch" if any(isinstance(i["dims"][0], str) for i in inputs if i["dims"]) else None)


def graph_inputs(spec: str, model) -> list[dict[str, Any]]:
    """The inputs the graph takes from its caller (not initializers), dims as ints or names."""
    initializers = {t.name for t in model.graph.initializer}
    inputs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        if tensor.elem_type not in ONNX_DTYPES:
            raise WorkloadError(f"--model {spec}: input {value.name!r} has ONNX element type {tensor.elem_type}, "
                                f"not one dlcompare feeds ({', '.join(sorted(set(ONNX_DTYPES.values())))})")
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim]
        inputs.append({"name": value.name, "dtype": ONNX_DTYPES[tensor.elem_type], "dims": dims})
    if not inputs:
        raise WorkloadError(f"--model {spec}: the graph takes no inputs")
    return inputs


def concrete_dims(entry: Mapping[str, Any], batch: int) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else batch if i == 0 else OTHER_DIM for i, d in enumerate(entry["dims"]))


def input_specs(params: Mapping[str, Any]) -> list[TensorSpec]:
    """Floats normal; an integer input named like a mask all ones, any other (token ids) in [0, 100)."""
    specs = []
    for entry in params["inputs"]:
        integer = entry["dtype"].startswith("int") or entry["dtype"] == "bool"
        init = ("ones" if "mask" in entry["name"].lower() else "randint:100") if integer else "randn"
        specs.append(TensorSpec(concrete_dims(entry, int(params["batch"])), entry["dtype"], name=entry["name"], init=init))
    return specs
