"""PyTorch's int8 path, shared by eager (the int8 reference), Inductor and AOTInductor:
PT2E export quantization with the X86 Inductor quantizer, static, per-channel weights,
as PyTorch's "PyTorch 2 Export Quantization with X86 Backend through Inductor" tutorial
does it. torch 2.13 no longer ships ``torch.ao.quantization.quantize_pt2e``; torchao's
``torchao.quantization.pt2e`` is where it is maintained now.
"""
from __future__ import annotations

from typing import Any, Sequence

from .base import has_vnni

# What every PT2E cell records as its quantizer (settings.quantizer).
PT2E_SETTINGS = {"quantizer": "torchao X86InductorQuantizer (PT2E, torchao.quantization.pt2e)",
                 "config": "get_default_x86_inductor_quantization_config(reduce_range): static, per-channel int8 "
                           "weights, per-tensor uint8 activations", "calibration": "prepare_pt2e -> calibration batches -> convert_pt2e"}


def reduce_range(vnni: bool | None = None) -> bool:
    """7-bit activations on a CPU without VNNI, as torchao's config advises ("Set it to True
    on earlier CPUs without VNNI to avoid accuracy issue"): there Inductor's oneDNN int8
    kernels saturate, and GPT-2's and ViT's outputs fell to cosine 0.90 and 0.73 against
    fp32 at --size small, 0.998 and 0.994 with it (scripts/experiments/int8_saturation.py)."""
    return not (has_vnni() if vnni is None else vnni)


def pt2e_settings(vnni: bool | None = None) -> dict[str, Any]:
    """``PT2E_SETTINGS`` with reduce_range and the torchao version that quantized."""
    import importlib.metadata

    return {**PT2E_SETTINGS, "reduce_range": reduce_range(vnni), "torchao": importlib.metadata.version("torchao")}


# Ops of a converted PT2E graph that only convert between int8 and float.
_CONVERTERS = frozenset({"quantize_per_tensor", "dequantize_per_tensor", "quantize_per_channel",
                         "dequantize_per_channel", "choose_qparams"})
# Ops that only move or relabel data (a layout op is neither int8 nor fp32 work); the edge
# dialect's view ops carry a "_copy" suffix (view_copy), which ``op_name`` drops.
_LAYOUT = frozenset({"view", "reshape", "permute", "transpose", "expand", "flatten", "unsqueeze", "squeeze", "slice",
                     "select", "clone", "contiguous", "getitem", "t", "sym_size", "alias", "detach", "_unsafe_view",
                     "view_as", "expand_as", "reshape_as", "unflatten", "split", "split_with_sizes", "unsafe_split",
                     "unbind", "chunk", "narrow", "as_strided", "lift_fresh", "_reshape_alias"})


def x86_inductor_quantizer(reduced: bool | None = None) -> Any:
    """torchao's X86InductorQuantizer with its default (static, per-channel) config, the
    range reduced as ``reduced`` says (None: on a CPU without VNNI, ``reduce_range``)."""
    import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as xiq

    quantizer = xiq.X86InductorQuantizer()
    config = xiq.get_default_x86_inductor_quantization_config(reduce_range=reduce_range() if reduced is None else reduced)
    quantizer.set_global(config)
    return quantizer


def quantize(module: Any, example_inputs: Sequence[Any], batches: Sequence[Sequence[Any]], quantizer: Any = None):
    """The module exported, annotated by ``quantizer`` (default: the X86 Inductor
    quantizer), calibrated on ``batches`` and converted: a GraphModule whose quantized ops
    run int8 in the backend that lowers them and as reference (quantize, dequantize, fp32
    op) kernels in eager. The quantizer must derive from torchao's ``Quantizer``, as the
    X86 Inductor and ExecuTorch's XNNPACK quantizers do."""
    import torch
    from torchao.quantization.pt2e import move_exported_model_to_eval
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    exported = torch.export.export(module, tuple(example_inputs)).module()
    prepared = prepare_pt2e(exported, quantizer if quantizer is not None else x86_inductor_quantizer())
    with torch.no_grad():
        for batch in batches:
            prepared(*batch)
    converted = convert_pt2e(prepared)
    move_exported_model_to_eval(converted)
    return converted


def op_counts(graph_module: Any) -> dict[str, int]:
    """How many compute ops of a converted PT2E graph take int8-quantized inputs (a
    dequantize feeds them: Inductor fuses that pattern into an int8 kernel) and how many
    stay fp32; conversions and layout ops are counted apart."""
    counts = {"int8": 0, "fp32": 0, "conversions": 0}
    for node in graph_module.graph.nodes:
        kind = node_kind(node)
        if kind is not None:
            counts[kind] += 1
    return counts


def op_name(target: Any) -> str:
    """An op's base name, without namespace or overload: "linear" for aten.linear.default,
    for ExecuTorch's edge op of it (which wraps the aten op) and for its view_copy-style
    edge variants; a Python function's own name (getitem)."""
    # an aten OpOverload names itself (_opname); an edge op passes that through to the one it wraps
    name = getattr(target, "_opname", None) or getattr(target, "__name__", None) or str(target)
    return name.removesuffix("_copy") if name != "_to_copy" else name


def node_kind(node: Any) -> str | None:
    """"conversions" for a quantize or dequantize node, None for a layout op, an assertion
    or a non-op node, "int8" for a compute op fed by a dequantize, else "fp32"."""
    if node.op != "call_function":
        return None
    name = op_name(node.target)
    if name in _CONVERTERS:
        return "conversions"
    if name in _LAYOUT or name.startswith("_assert"):
        return None
    return "int8" if any(is_dequantize(arg) for arg in flat_args(node.args)) else "fp32"


def flat_args(args: Sequence[Any]) -> list[Any]:
    """A node's args with list args (cat's tensors) spread out."""
    return [item for arg in args for item in (arg if isinstance(arg, (list, tuple)) else [arg])]


def is_dequantize(arg: Any) -> bool:
    return getattr(arg, "op", None) == "call_function" and op_name(arg.target).startswith("dequantize")
