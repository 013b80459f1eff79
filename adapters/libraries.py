"""Which library ran a compiled model's GEMMs and convolutions: MKL, oneDNN, MLAS,
OpenVINO's CPU plugin kernels, TVM's or IREE's own code. On AMD CPUs MKL's fp32 GEMMs run
far below oneDNN's, so much of a "compiler speedup" on a GEMM graph can be an escape from
MKL; the cell says which library each side used. Read from the compiled graph or one
profiled call, never from a timed one."""
from __future__ import annotations

from typing import Any, Callable, Iterable

# torch.profiler op names -> (kind, library); "BLAS" is MKL where torch was built with it.
TORCH_OPS = {
    "mkl::_mkl_linear": ("gemm", "MKL"),
    "mkldnn::_linear_pointwise": ("gemm", "oneDNN"),
    "onednn::qlinear_pointwise": ("gemm", "oneDNN"),
    "aten::mkldnn_linear": ("gemm", "oneDNN"),
    "mkldnn::_convolution_pointwise": ("conv", "oneDNN"),
    "aten::mkldnn_convolution": ("conv", "oneDNN"),
    "onednn::qconv2d_pointwise": ("conv", "oneDNN"),
    "aten::addmm": ("gemm", "BLAS"),
    "aten::mm": ("gemm", "BLAS"),
    "aten::bmm": ("gemm", "BLAS"),
    "aten::baddbmm": ("gemm", "BLAS"),
    "aten::_scaled_dot_product_flash_attention_for_cpu": ("gemm", "ATen CPU flash attention"),
    "aten::slow_conv2d_forward": ("conv", "ATen (no oneDNN)"),
    "aten::_slow_conv2d_forward": ("conv", "ATen (no oneDNN)"),  # torch 2.13's name (small convolutions)
}


def merge(found: Iterable[tuple[str, str]]) -> dict[str, str]:
    """{kind: "lib" or "lib1 + lib2"} from (kind, library) pairs."""
    out: dict[str, set[str]] = {}
    for kind, library in found:
        out.setdefault(kind, set()).add(library)
    return {kind: " + ".join(sorted(libs)) for kind, libs in sorted(out.items())}


def from_torch_ops(names: Iterable[str], blas: str) -> dict[str, str]:
    return merge((kind, blas if library == "BLAS" else library)
                 for kind, library in (TORCH_OPS[n] for n in names if n in TORCH_OPS))


def torch_blas() -> str:
    import torch

    return "MKL" if torch.backends.mkl.is_available() else "BLAS (not MKL)"


def torch_libraries(run: Callable[[Any], Any], prepared: Any) -> dict[str, str]:
    """The libraries of the ops one call dispatches, as torch.profiler names them."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run(prepared)
    return from_torch_ops({evt.key for evt in prof.key_averages()}, torch_blas())


ONNX_KINDS = {"MatMul": "gemm", "Gemm": "gemm", "FusedMatMul": "gemm", "Conv": "conv", "FusedConv": "conv",
              "ConvTranspose": "conv", "Attention": "gemm", "MultiHeadAttention": "gemm"}


def from_onnx_ops(op_types: Iterable[str], library: str = "MLAS") -> dict[str, str]:
    """ORT's CPU execution provider runs MatMul, Gemm and Conv on MLAS, its own kernels."""
    return merge((ONNX_KINDS[op], library) for op in op_types if op in ONNX_KINDS)


OPENVINO_KINDS = {"FullyConnected": "gemm", "MatMul": "gemm", "Convolution": "conv", "GroupConvolution": "conv",
                  "ScaledDotProductAttention": "gemm"}


def from_openvino_layers(layers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """(layerType, primitiveType) of the CPU plugin's runtime model: its kernels (oneDNN-
    based brgemm/jit, or its own), by the primitive it picked."""
    return merge((OPENVINO_KINDS[layer], f"OpenVINO CPU plugin ({primitive or '?'})")
                 for layer, primitive in layers if layer in OPENVINO_KINDS)


# AOTInductor's C shim calls in a package's wrapper.cpp (aoti_torch_cpu_<name>) -> (kind, library).
AOTI_SHIMS = {
    "_linear_pointwise": ("gemm", "oneDNN"),
    "mkldnn__linear_pointwise": ("gemm", "oneDNN"),
    "mkldnn__convolution_pointwise": ("conv", "oneDNN"),
    "mkldnn_convolution": ("conv", "oneDNN"),
    "_mkl_linear": ("gemm", "MKL"),
    "addmm_out": ("gemm", "BLAS"),
    "mm_out": ("gemm", "BLAS"),
    "bmm_out": ("gemm", "BLAS"),
    "baddbmm_out": ("gemm", "BLAS"),
    "_scaled_dot_product_flash_attention_for_cpu": ("gemm", "ATen CPU flash attention"),
}


def from_aoti_package(package) -> dict[str, str]:
    """The libraries an AOTInductor package calls, from its generated wrapper source
    (torch.profiler does not see the calls of its C++ wrapper)."""
    import re
    import zipfile

    with zipfile.ZipFile(package) as archive:
        source = "".join(archive.read(name).decode(errors="ignore") for name in archive.namelist()
                         if name.endswith("wrapper.cpp"))
    calls = set(re.findall(r"aoti_torch_cpu_(\w+?)\(", source))
    blas = torch_blas()
    return merge((kind, blas if library == "BLAS" else library)
                 for kind, library in (AOTI_SHIMS[c] for c in calls if c in AOTI_SHIMS))
