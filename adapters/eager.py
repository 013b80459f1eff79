"""PyTorch eager: the reference every other backend is measured against."""
from __future__ import annotations

from typing import Any, Sequence

from .base import Backend, CompileContext, Compiled, CompileResult
from .profiling import CrossCheck, KernelProfile, torch_cuda_profile, torch_profile, torch_timer


class TorchCompiled(Compiled):
    """Calls a torch callable under no_grad (inference only, as in the survey)."""

    def __init__(self, fn, device: str):
        import torch

        self._fn = fn
        self._no_grad = torch.no_grad
        self._cuda = device == "cuda"

    def run(self, prepared: Any) -> Any:
        with self._no_grad():
            return self._fn(*prepared)

    def synchronize(self) -> None:
        if self._cuda:
            import torch

            torch.cuda.synchronize()

    def profile(self, prepared: Any, calls: int) -> KernelProfile:
        if self._cuda:
            return torch_cuda_profile(self.run, prepared, calls, self.synchronize)
        return torch_profile(self.run, prepared, calls, self.synchronize)

    def libraries(self, prepared: Any, kinds: set[str]) -> dict[str, str] | None:
        from .libraries import torch_libraries

        return None if self._cuda else torch_libraries(self.run, prepared)

    def crosscheck(self, prepared: Any, seconds: float) -> CrossCheck:
        return torch_timer(self.run, prepared, seconds)  # it synchronizes CUDA itself


class EagerBackend(Backend):
    name = "eager"
    tf32_math = True
    rank = 0  # the reference: first in every listing
    description = "PyTorch eager mode (the reference)"
    packages = ("torch",)
    devices = ("cpu", "cuda")
    compiles = False
    quantizes = True  # int8: the PT2E-quantized model, run in eager (adapters/pt2e.py)
    quantizer_modules = ("torchao",)
    # The module is called as it is: an ONNX file's module runs it in onnxruntime with graph
    # optimizations off, the reference for ONNX workloads (workloads.zoo.onnx_file).
    onnx_frontend = "the reference: onnxruntime with graph optimizations off"

    def required_modules(self) -> tuple[str, ...]:
        return ("torch",)

    @classmethod
    def gemm_probe(cls):
        from .libraries import torch_blas

        def make(n: int):
            import torch

            a, b, out = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
            return lambda: torch.mm(a, b, out=out)  # aten::mm: MKL's sgemm in the pip build
        return f"{torch_blas()} (torch.mm)", make

    def weight_only_recipe(self, bits: int) -> dict[str, Any] | None:
        from .weight_only import torchao_recipe

        return torchao_recipe(bits)

    def quantize_weights(self, module: Any, bits: int) -> Any:
        from .weight_only import torchao_weight_only

        return torchao_weight_only(module, bits)

    def settings(self, ctx: CompileContext) -> dict[str, Any]:
        from .pt2e import pt2e_settings

        return {"no_grad": True, "eval_mode": True, **({"quantizer": pt2e_settings()} if ctx.calibration else {})}

    def compile(self, module: Any, example_inputs: Sequence[Any], ctx: CompileContext) -> CompileResult:
        if ctx.calibration is not None:
            from . import pt2e

            with ctx.phase("quantize"):
                module = pt2e.quantize(module, example_inputs, ctx.calibration)
            ctx.info["int8_ops"] = pt2e.op_counts(module)
        if getattr(module, "reference", None):  # not torch: an ONNX file's module says what runs it
            ctx.info["reference"] = module.reference
        return CompileResult(TorchCompiled(module, ctx.device), info=ctx.info)
