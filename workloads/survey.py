"""The survey's five FP32 inference graphs (paper section 7).

Default sizes are chosen so one eager call takes roughly 1-50 ms on a 2-core
CPU; ``small`` is for tests, ``large`` for bigger machines and GPUs.
"""
from __future__ import annotations

from .base import TensorSpec, Workload, lazy

# The modules live in workloads/nets/ and import torch when a worker first builds one: the
# parent only plans runs, and importing torch there cost every run 2 s.
ElementwiseChain = lazy("nets.survey", "ElementwiseChain")
NormResidual = lazy("nets.survey", "NormResidual")
ConvBlocks = lazy("nets.survey", "ConvBlocks")
MLP = lazy("nets.survey", "MLP")
SelfAttention = lazy("nets.survey", "SelfAttention")


PAPER_WORKLOADS = [
    Workload(
        name="elementwise_chain",
        description="13 fused-able pointwise ops (sin, exp, tanh, sigmoid, log, ...) on one tensor",
        sizes={
            "small": {"rows": 64, "cols": 128},
            "default": {"rows": 1024, "cols": 2048},
            "large": {"rows": 4096, "cols": 4096},
        },
        build=lambda p: ElementwiseChain(),
        inputs=lambda p: [TensorSpec((p["rows"], p["cols"]), dynamic_dims={0: "batch"})],
        tags=("paper", "memory-bound"),
        batch_param="rows",
    ),
    Workload(
        name="norm_residual",
        description="LayerNorm + GELU + residual add, repeated blocks",
        sizes={
            "small": {"batch": 2, "seq": 16, "dim": 64, "blocks": 2},
            "default": {"batch": 8, "seq": 256, "dim": 768, "blocks": 4},
            "large": {"batch": 32, "seq": 512, "dim": 1024, "blocks": 6},
        },
        build=lambda p: NormResidual(p["dim"], p["blocks"]),
        inputs=lambda p: [
            TensorSpec((p["batch"], p["seq"], p["dim"]), dynamic_dims={0: "batch", 1: "seq"})
        ],
        tags=("paper", "memory-bound"),
        batch_param="batch",
    ),
    Workload(
        name="conv",
        description="Conv2d 3x3 + BatchNorm + ReLU blocks (eval mode)",
        sizes={
            "small": {"batch": 1, "in_ch": 3, "hw": 16, "widths": [8, 16]},
            "default": {"batch": 4, "in_ch": 3, "hw": 64, "widths": [32, 64, 64]},
            "large": {"batch": 32, "in_ch": 3, "hw": 112, "widths": [64, 128, 128, 128]},
        },
        build=lambda p: ConvBlocks(p["in_ch"], p["widths"]),
        inputs=lambda p: [TensorSpec((p["batch"], p["in_ch"], p["hw"], p["hw"]), dynamic_dims={0: "batch"})],
        tags=("paper", "compute-bound"),
        batch_param="batch",
    ),
    Workload(
        name="mlp",
        description="3-layer MLP with GELU",
        sizes={
            "small": {"batch": 4, "dim": 32, "hidden": 64},
            "default": {"batch": 64, "dim": 512, "hidden": 2048},
            "large": {"batch": 512, "dim": 1024, "hidden": 4096},
        },
        build=lambda p: MLP(p["dim"], p["hidden"]),
        inputs=lambda p: [TensorSpec((p["batch"], p["dim"]), dynamic_dims={0: "batch"})],
        tags=("paper", "compute-bound"),
        batch_param="batch",
    ),
    Workload(
        name="attention",
        description="multi-head self-attention (explicit softmax) + residual",
        sizes={
            "small": {"batch": 1, "seq": 16, "dim": 32, "heads": 4},
            "default": {"batch": 2, "seq": 256, "dim": 512, "heads": 8},
            "large": {"batch": 8, "seq": 1024, "dim": 1024, "heads": 16},
        },
        build=lambda p: SelfAttention(p["dim"], p["heads"]),
        inputs=lambda p: [
            TensorSpec((p["batch"], p["seq"], p["dim"]), dynamic_dims={0: "batch", 1: "seq"})
        ],
        tags=("paper", "compute-bound"),
        batch_param="batch",
    ),
]
