"""The work of one model call, for the roofline: FLOPs from torch's flop counter for
matmul/conv/attention plus a per-element cost for every pointwise, normalization and
reduction op (``POINTWISE_FLOPS``: transcendental functions are not free, so a chain of
them is not labelled memory-bound); minimum bytes are inputs + weights + outputs, each
moved once. Counted in the worker from an eager call (``compare.worker.steps``)."""
from __future__ import annotations

from typing import Any, Sequence


def tensor_bytes(tensors: Sequence[Any]) -> int:
    return int(sum(t.numel() * t.element_size() for t in tensors if hasattr(t, "numel")))


# FLOPs per element of each aten op that torch's flop counter leaves at 0. Transcendental
# functions cost their FMA-equivalent operation count in a vectorized polynomial
# implementation (range reduction + a minimax polynomial, as in SLEEF and ATen's
# Vectorized): an estimate good to a factor of about 2, which is enough to tell a
# compute-bound chain from a memory-bound one. Softmax, norms and GELU are their parts.
POINTWISE_FLOPS = {
    **dict.fromkeys(("add", "sub", "rsub", "mul", "div", "neg", "abs", "relu", "clamp", "clamp_min", "clamp_max",
                     "hardtanh", "maximum", "minimum", "where", "threshold", "sqrt", "rsqrt", "reciprocal",
                     "square", "eq", "ne", "lt", "le", "gt", "ge", "sign", "floor", "ceil", "round"), 1),
    **dict.fromkeys(("exp", "exp2", "expm1"), 10),
    **dict.fromkeys(("log", "log2", "log1p"), 12),
    **dict.fromkeys(("sin", "cos"), 14),
    "tanh": 16, "sigmoid": 12, "silu": 13, "erf": 16, "pow": 22, "elu": 12, "softplus": 22,
    "_softmax": 14, "_log_softmax": 16,  # max, subtract, exp, sum, divide (log: + log)
    "native_layer_norm": 8, "native_batch_norm": 4, "_native_batch_norm_legit_no_training": 4,
    **dict.fromkeys(("mean", "sum", "amax", "amin", "var_mean", "var"), 1),  # per input element
}
GELU_FLOPS = {"none": 20, "tanh": 22}  # erf or tanh, plus the multiply-adds around it
# Reductions and normalizations: counted per element of their input, not their output.
PER_INPUT = {"mean", "sum", "amax", "amin", "var_mean", "var", "_softmax", "_log_softmax",
             "native_layer_norm", "native_batch_norm", "_native_batch_norm_legit_no_training"}


def _pointwise_counter():
    from torch.utils._python_dispatch import TorchDispatchMode

    class PointwiseCounter(TorchDispatchMode):
        """FLOPs of the ops in POINTWISE_FLOPS (and pooling), per op name."""

        def __init__(self):
            super().__init__()
            self.by_op: dict[str, int] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = func.overloadpacket.__name__.rstrip("_")
            flops = _op_flops(name, args, kwargs, out)
            if flops:
                self.by_op[name] = self.by_op.get(name, 0) + flops
            return out

    return PointwiseCounter()


def _numel(value) -> int:
    if isinstance(value, (tuple, list)):
        return _numel(value[0]) if value else 0
    return int(value.numel()) if hasattr(value, "numel") else 0


def _op_flops(name: str, args, kwargs, out) -> int:
    if name == "gelu":
        return _numel(out) * GELU_FLOPS.get(kwargs.get("approximate", "none"), 20)
    if name == "max_pool2d_with_indices":
        kernel = args[1] if len(args) > 1 else kwargs.get("kernel_size", (1, 1))
        kernel = list(kernel) * (2 // len(kernel)) if len(kernel) < 2 else kernel
        return _numel(out) * int(kernel[0]) * int(kernel[1])
    cost = POINTWISE_FLOPS.get(name)
    if not cost:
        return 0
    return (_numel(args[0]) if name in PER_INPUT and args else _numel(out)) * cost


def count_work(model, inputs: Sequence[Any], outputs: Sequence[Any]) -> dict[str, Any]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    pointwise = _pointwise_counter()
    with torch.no_grad(), counter, pointwise:
        model(*inputs)
    weights = list(model.parameters()) + list(model.buffers())
    parts = {"inputs": tensor_bytes(inputs), "weights": tensor_bytes(weights), "outputs": tensor_bytes(outputs)}
    matmul = int(counter.get_total_flops())
    other = sum(pointwise.by_op.values())
    return {"flops": matmul + other, "matmul_flops": matmul, "pointwise_flops": other,
            "pointwise_flops_by_op": dict(sorted(pointwise.by_op.items(), key=lambda kv: -kv[1])),
            "min_bytes": sum(parts.values()), "bytes_by_part": parts}
