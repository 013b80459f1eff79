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


# Nodes of a converted PT2E graph that only convert between int8 and float.
_CONVERTERS = ("quantize_per_tensor", "dequantize_per_tensor", "quantize_per_channel", "dequantize_per_channel",
               "choose_qparams")
# Ops that compute (a layout op is neither int8 nor fp32 work).
_LAYOUT = ("view", "reshape", "permute", "transpose", "expand", "flatten", "unsqueeze", "squeeze", "slice", "select",
           "clone", "contiguous", "getitem", "t.default", "_assert", "sym_size", "alias", "detach")


def quantize(module: Any, example_inputs: Sequence[Any], batches: Sequence[Sequence[Any]]):
    """The module exported, annotated by the X86 Inductor quantizer, calibrated on
    ``batches`` and converted: a GraphModule whose quantized ops run int8 in Inductor and
    as reference (quantize, dequantize, fp32 op) kernels in eager."""
    import torch
    import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as xiq
    from torchao.quantization.pt2e import move_exported_model_to_eval
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    exported = torch.export.export(module, tuple(example_inputs)).module()
    quantizer = xiq.X86InductorQuantizer()
    quantizer.set_global(xiq.get_default_x86_inductor_quantization_config(reduce_range=reduce_range()))
    prepared = prepare_pt2e(exported, quantizer)
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
        if node.op != "call_function":
            continue
        target = str(node.target)
        if any(name in target for name in _CONVERTERS):
            counts["conversions"] += 1
        elif any(name in target for name in _LAYOUT):
            continue
        elif any(getattr(arg, "op", None) == "call_function" and "dequantize" in str(arg.target) for arg in node.args):
            counts["int8"] += 1
        else:
            counts["fp32"] += 1
    return counts
