"""The model suite: real architectures in plain PyTorch, random weights.

No downloads: weights are drawn from the run's seed (random weights do not
change speed, and every backend sees the same ones). ``default`` sizes are the
real published shapes where one call fits a 2-core CPU (ResNet-18,
MobileNetV2 1.0, ViT-Ti/16 at 224x224; MiniLM-L6-H384-shaped BERT and GPT-2
stacks at 128 tokens); ``large`` is the classic big sibling (ResNet-50,
BERT-base, GPT-2 small, ViT-S/16); ``small`` is for tests.

Everything here is written with ops every frontend lowers (explicit attention
with matmul + softmax, an additive causal mask, mean instead of adaptive
pooling), so a failure to lower is the compiler's, not an exotic op's.
"""
from __future__ import annotations

from .base import TensorSpec, Workload, lazy

# The modules live in workloads/nets/ and import torch when a worker first builds one: the
# parent only plans runs, and importing torch there cost every run 2 s.
ResNet = lazy("nets.models", "ResNet")
MobileNetV2 = lazy("nets.models", "MobileNetV2")
BertEncoder = lazy("nets.models", "BertEncoder")
GPT2Decoder = lazy("nets.models", "GPT2Decoder")
ViT = lazy("nets.models", "ViT")


def _image(p) -> list[TensorSpec]:
    return [TensorSpec((p["batch"], 3, p["hw"], p["hw"]), name="image")]


def _token_ids(p) -> list[TensorSpec]:
    return [TensorSpec((p["batch"], p["seq"]), dtype="int64", name="input_ids", init=f"randint:{p['vocab']}")]


MODEL_WORKLOADS = [
    Workload(
        name="resnet",
        description="ResNet image classifier (ResNet-18 at default, ResNet-50 at large), 224x224",
        sizes={
            "small": {"batch": 1, "depth": 18, "width": 16, "hw": 64},
            "default": {"batch": 1, "depth": 18, "width": 64, "hw": 224},
            "large": {"batch": 1, "depth": 50, "width": 64, "hw": 224},
        },
        build=lambda p: ResNet(p["depth"], p["width"]),
        inputs=_image,
        tags=("models", "cnn", "logits", "classifier"),
        batch_param="batch",
    ),
    Workload(
        name="mobilenet_v2",
        description="MobileNetV2 (inverted residuals, depthwise 3x3), 224x224",
        sizes={
            "small": {"batch": 1, "width_mult": 0.25, "hw": 64},
            "default": {"batch": 1, "width_mult": 1.0, "hw": 224},
            "large": {"batch": 1, "width_mult": 1.4, "hw": 224},
        },
        build=lambda p: MobileNetV2(p["width_mult"]),
        inputs=_image,
        tags=("models", "cnn", "logits", "classifier"),
        batch_param="batch",
    ),
    Workload(
        name="bert",
        description="BERT-style encoder (post-LN), 128 tokens; default 6 x 384 (MiniLM shape), large BERT-base",
        sizes={
            "small": {"batch": 1, "seq": 32, "dim": 64, "heads": 2, "layers": 2, "vocab": 1000},
            "default": {"batch": 1, "seq": 128, "dim": 384, "heads": 6, "layers": 6, "vocab": 30522},
            "large": {"batch": 1, "seq": 128, "dim": 768, "heads": 12, "layers": 12, "vocab": 30522},
        },
        build=lambda p: BertEncoder(p["vocab"], p["seq"], p["dim"], p["heads"], p["layers"]),
        inputs=_token_ids,
        tags=("models", "transformer"),
        batch_param="batch",
    ),
    Workload(
        name="gpt2",
        description="GPT-2-style causal decoder, prefill of a 128-token prompt -> next-token logits; "
                    "default 6 x 384, large GPT-2 small",
        sizes={
            "small": {"batch": 1, "seq": 32, "dim": 64, "heads": 2, "layers": 2, "vocab": 1000},
            "default": {"batch": 1, "seq": 128, "dim": 384, "heads": 6, "layers": 6, "vocab": 50257},
            "large": {"batch": 1, "seq": 128, "dim": 768, "heads": 12, "layers": 12, "vocab": 50257},
        },
        build=lambda p: GPT2Decoder(p["vocab"], p["seq"], p["dim"], p["heads"], p["layers"]),
        inputs=_token_ids,
        tags=("models", "transformer", "logits"),
        batch_param="batch",
    ),
    Workload(
        name="vit",
        description="ViT image transformer, 224x224 patches of 16; default ViT-Ti/16, large ViT-S/16",
        sizes={
            "small": {"batch": 1, "hw": 32, "patch": 8, "dim": 64, "heads": 2, "layers": 2, "classes": 10},
            "default": {"batch": 1, "hw": 224, "patch": 16, "dim": 192, "heads": 3, "layers": 12, "classes": 1000},
            "large": {"batch": 1, "hw": 224, "patch": 16, "dim": 384, "heads": 6, "layers": 12, "classes": 1000},
        },
        build=lambda p: ViT(p["hw"], p["patch"], p["dim"], p["heads"], p["layers"], p["classes"]),
        inputs=_image,
        tags=("models", "transformer", "logits", "classifier"),
        batch_param="batch",
    ),
]
