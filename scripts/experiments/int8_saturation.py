"""Does int8 accuracy through Inductor and OpenVINO depend on the CPU's VNNI? An A/B of each
quantizer's own guard against the 16-bit saturation of x86 int8 instructions without VNNI
(VPMADDUBSW adds two u8*s8 products into int16), on the model suite, without dlcompare's
harness:

- PT2E (torchao X86InductorQuantizer), run by Inductor: ``reduce_range`` off (the default)
  and on (7-bit activations; torchao: "Set it to True on earlier CPUs without VNNI");
- NNCF for OpenVINO: ``overflow_fix`` FIRST_LAYER (the default), ENABLE (7-bit weights of
  every Conv/MatMul), DISABLE.

    python scripts/experiments/int8_saturation.py [--size small] [--workloads gpt2,vit]

Prints, per workload and variant, the cosine similarity and relative L2 error of the int8
output against fp32 eager, over the same seeded draws, plus the PT2E model in eager (which
runs quantize/dequantize around fp32 kernels and so cannot saturate).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from workloads import build_model, make_inputs, resolve_workloads  # noqa: E402


def agreement(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    out, ref = out.double().flatten(), ref.double().flatten()
    cosine = torch.nn.functional.cosine_similarity(out, ref, dim=0).item()
    return cosine, ((out - ref).norm() / ref.norm()).item()


def first(outputs):
    return outputs[0] if isinstance(outputs, (tuple, list)) else outputs


def pt2e(module, example, batches, reduce_range: bool):
    """dlcompare's own PT2E path (adapters/pt2e.py), the range reduced as asked."""
    from adapters import pt2e as dlcompare_pt2e

    return dlcompare_pt2e.quantize(module, example, batches, dlcompare_pt2e.x86_inductor_quantizer(reduce_range))


def nncf_model(module, example, batches, overflow_fix: str):
    import nncf
    import openvino as ov
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, OverflowFix

    model = ov.convert_model(module, example_input=tuple(example))
    transformer = any(op.get_type_name() == "Softmax" for op in model.get_ops())
    dataset = nncf.Dataset(batches, lambda batch: tuple(t.numpy() for t in batch))
    quantized = nncf.quantize(model, dataset, subset_size=len(batches), preset=nncf.QuantizationPreset.PERFORMANCE,
                              advanced_parameters=AdvancedQuantizationParameters(overflow_fix=OverflowFix(overflow_fix)),
                              **({"model_type": nncf.ModelType.TRANSFORMER} if transformer else {}))
    compiled = ov.Core().compile_model(quantized, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return lambda *xs: torch.from_numpy(compiled([x.numpy() for x in xs])[0])


def frozen(compiled):
    """Inductor lowers PT2E's quantized patterns to int8 (oneDNN) kernels only with freezing
    on, as PyTorch's X86 Inductor quantization tutorial sets it; without it they run as
    quantize/dequantize around fp32 kernels, like eager."""
    import torch._inductor.config as inductor_config

    def run(*xs):
        with inductor_config.patch(freezing=True):
            return compiled(*xs)
    return run


def variants(module, example, batches, only_inductor: bool = False):
    for reduce_range in (False, True):
        converted = pt2e(module, example, batches, reduce_range)
        yield f"pt2e-eager reduce_range={reduce_range}", converted
        yield f"inductor reduce_range={reduce_range}", frozen(torch.compile(converted))
    if only_inductor:
        return
    for fix in ("first_layer_only", "enable", "disable"):
        yield f"openvino overflow_fix={fix}", nncf_model(module, example, batches, fix)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small")
    parser.add_argument("--workloads", default="gpt2,vit")
    parser.add_argument("--draws", type=int, default=8)
    parser.add_argument("--only-inductor", action="store_true")
    args = parser.parse_args()
    for workload in resolve_workloads(args.workloads.split(",")):
        module = build_model(workload, args.size).eval()
        specs = workload.inputs(workload.params(args.size))
        batches = [make_inputs(specs, seed=1_000_003 + i) for i in range(8)]
        draws = [make_inputs(specs, seed=i) for i in range(args.draws)]
        with torch.no_grad():
            refs = [first(module(*d)) for d in draws]
            for name, run in variants(module, draws[0], batches, args.only_inductor):
                scores = [agreement(first(run(*d)).float(), ref) for d, ref in zip(draws, refs)]
                cosine, rel = min(s[0] for s in scores), max(s[1] for s in scores)
                print(f"{workload.name:8s} {name:38s} cosine min {cosine:.4f}  rel err max {rel:.3f}", flush=True)


if __name__ == "__main__":
    main()
