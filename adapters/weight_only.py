"""Weight-only int8 and int4 (``--dtype int8wo`` / ``int4wo``, the decode suite), as each
runtime ships it for CPU LLMs. Activations stay fp32 except where the runtime's own CPU
recipe quantizes them too (ORT GenAI's ``accuracy_level=4``, ExecuTorch's 8da4w): every
cell records the recipe it ran (``info.weight_only``).

- torch (eager, Inductor): torchao's ``quantize_``: ``Int8WeightOnlyConfig`` (symmetric,
  per row) and, for int4 on CPU, ``PrototypeInt4WeightOnlyConfig`` (asymmetric uint4 in
  groups, ``aten._weight_int4pack_mm_for_cpu``; the stable ``Int4WeightOnlyConfig`` has no
  CPU packing in torchao 0.18), its linears fed bf16 activations: that kernel's vectorized
  tiles take bf16 only (docs/cli.md has the measurement). ``set_inductor_config=False``:
  torchao would otherwise change Inductor's global settings, and the fp32 cells compile
  without them.
- ExecuTorch: 8-bit dynamic activations with int8 or int4 weights (8da8w / 8da4w,
  ``Int8DynamicActivationIntxWeightConfig``), as its ``export_llm`` does: XNNPACK delegates
  no weight-only linear.
- ONNX Runtime: ``MatMulNBitsQuantizer`` on the exported graph, with ORT GenAI's model
  builder's CPU defaults (block 32, symmetric, ``accuracy_level=4``).
- OpenVINO: NNCF's data-free ``compress_weights`` on the converted model: INT8_ASYM per
  channel, and INT4_ASYM in groups of 128 with ratio 1.0 (optimum-intel's default 4-bit
  config), the embeddings and the last MatMul kept INT8_ASYM as NNCF does by default.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

# Groups of 32 for the torch-side int4 recipes: every zoo decoder's hidden size divides by 32
# (SmolLM2's 576 does not by 128, which torchao's and XNNPACK's group-128 paths need).
TORCH_INT4_GROUP = 32
ORT_BLOCK = 32
ORT_ACCURACY_LEVEL = 4
OPENVINO_INT4_GROUP = 128
INT4_PACK_N = 16  # aten._convert_weight_to_int4pack_for_cpu packs output rows in sixteens


def torchao_recipe(bits: int) -> dict[str, Any]:
    if bits == 8:
        return {"quantizer": "torchao quantize_(Int8WeightOnlyConfig)", "weights": "int8 symmetric per row",
                "activations": "fp32"}
    return {"quantizer": "torchao quantize_(PrototypeInt4WeightOnlyConfig)",
            "weights": f"uint4 asymmetric, groups of {TORCH_INT4_GROUP}, bf16 scales",
            "activations": "bf16 into the int4 linears (cast back to fp32 after each); fp32 elsewhere",
            "why_bf16": "aten's CPU int4 kernel has vectorized tiles for bf16 activations only (docs/cli.md)",
            "kernel": "aten._weight_int4pack_mm_for_cpu",
            "kept_fp32": f"Linear layers whose output width is not a multiple of {INT4_PACK_N} or input width not "
                         f"of {TORCH_INT4_GROUP} (the CPU int4 packing's constraint)"}


def torchao_weight_only(module: Any, bits: int) -> Any:
    """The module with its Linear weights quantized in place (torchao's CPU weight-only path)."""
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    if bits == 8:
        quantize_(module, Int8WeightOnlyConfig(set_inductor_config=False))
        return module
    from torchao.prototype.quantization.int4 import PrototypeInt4WeightOnlyConfig

    for linear in [m for fqn, m in module.named_modules() if _int4_packable(m, fqn)]:
        _feed_bf16(linear)
    quantize_(module, PrototypeInt4WeightOnlyConfig(group_size=TORCH_INT4_GROUP, set_inductor_config=False),
              filter_fn=_int4_packable)
    return module


def _feed_bf16(linear: Any) -> None:
    """``linear`` in bf16 (so its int4 scales are bf16), its input cast to bf16 and its output
    back to fp32: the int4 kernel's vectorized path, with the rest of the model left fp32."""
    import torch

    for name, param in list(linear.named_parameters(recurse=False)):  # new tensors: a tied embedding stays fp32
        setattr(linear, name, torch.nn.Parameter(param.detach().to(torch.bfloat16), requires_grad=False))
    linear.register_forward_pre_hook(lambda _, args: (args[0].to(torch.bfloat16), *args[1:]))
    linear.register_forward_hook(lambda _, args, out: out.to(torch.float32))


def _int4_packable(module: Any, fqn: str) -> bool:
    import torch

    return (isinstance(module, torch.nn.Linear) and module.out_features % INT4_PACK_N == 0
            and module.in_features % TORCH_INT4_GROUP == 0)


def executorch_recipe(bits: int) -> dict[str, Any]:
    weights = "int8 symmetric per row" if bits == 8 else f"int4 symmetric, groups of {TORCH_INT4_GROUP}"
    return {"quantizer": f"torchao quantize_(Int8DynamicActivationIntxWeightConfig): 8da{bits}w as ExecuTorch's "
                         "export_llm", "weights": weights, "activations": "int8 dynamic, asymmetric per token"}


def executorch_8da(module: Any, bits: int) -> Any:
    """ExecuTorch's LLM recipe: 8-bit dynamic activations, int8 (per row) or int4 (groups) weights."""
    import torch
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup

    granularity = PerAxis(0) if bits == 8 else PerGroup(TORCH_INT4_GROUP)
    config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8 if bits == 8 else torch.int4,
                                                   weight_granularity=granularity)
    quantize_(module, config, filter_fn=lambda m, fqn: isinstance(m, torch.nn.Linear)
              and (bits == 8 or m.in_features % TORCH_INT4_GROUP == 0))
    return module


def ort_recipe(bits: int) -> dict[str, Any]:
    return {"quantizer": f"onnxruntime MatMulNBitsQuantizer(bits={bits}, block_size={ORT_BLOCK}, is_symmetric=True, "
                         f"accuracy_level={ORT_ACCURACY_LEVEL})", "weights": f"int{bits} symmetric, blocks of {ORT_BLOCK}",
            "activations": "int8 inside MatMulNBits (accuracy_level 4, ORT GenAI's CPU default)",
            "ops": "MatMul with a constant weight (Gemm untouched)"}


def ort_matmul_nbits(model_path: Path, bits: int) -> Path:
    """The exported graph with its MatMuls as MatMulNBits, saved beside it."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(onnx.load(str(model_path)), bits=bits, block_size=ORT_BLOCK, is_symmetric=True,
                                     accuracy_level=ORT_ACCURACY_LEVEL, op_types_to_quantize=("MatMul",))
    quantizer.process()
    out = model_path.with_name(f"model.int{bits}wo.onnx")
    quantizer.model.save_model_to_file(str(out), True)  # external data: a 0.5B model's weights pass 2 GB in fp32
    return out


def openvino_recipe(bits: int) -> dict[str, Any]:
    if bits == 8:
        return {"quantizer": "nncf.compress_weights(mode=INT8_ASYM)", "weights": "int8 asymmetric per channel",
                "activations": "fp32"}
    return {"quantizer": f"nncf.compress_weights(mode=INT4_ASYM, group_size={OPENVINO_INT4_GROUP}, ratio=1.0), "
                         "group size adjusted where a dimension does not divide",
            "weights": f"int4 asymmetric, groups of {OPENVINO_INT4_GROUP}; embeddings and the last MatMul int8 "
                       "(NNCF's backup mode)", "activations": "fp32"}


def openvino_compress(model: Any, bits: int) -> Any:
    """NNCF's data-free weight compression of a converted model (in place, returned)."""
    import nncf

    if bits == 8:
        return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM)
    advanced = nncf.AdvancedCompressionParameters(group_size_fallback_mode=nncf.GroupSizeFallbackMode.ADJUST)
    return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT4_ASYM, group_size=OPENVINO_INT4_GROUP,
                                 ratio=1.0, advanced_parameters=advanced)
