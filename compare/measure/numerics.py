"""Numerical agreement: a backend's outputs against eager's and float64's, per precision."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class Precision:
    """One floating-point precision, under the one name used everywhere in dlcompare
    (``--dtype``, ``Cell.dtype``): its tensor element type (torch's name, as
    ``TensorSpec.dtype`` spells element types), its machine epsilon, and the (rtol, atol)
    within which a backend "agrees with eager": loose enough for a different summation
    order, tight enough to catch a wrong kernel."""

    name: str
    element_type: str
    eps: float
    tolerance: tuple[float, float]


PRECISIONS = {p.name: p for p in (
    Precision("fp64", "float64", 2.0**-52, (1e-7, 1e-7)),  # the numerics reference only
    Precision("fp32", "float32", 2.0**-23, (1e-4, 1e-4)),
    Precision("bf16", "bfloat16", 2.0**-7, (1.6e-2, 1e-2)),
    Precision("fp16", "float16", 2.0**-10, (1e-2, 1e-3)),
    # fp32 tensors, matmuls and convolutions on CUDA tensor cores with a 10-bit mantissa
    # (--dtype tf32, CUDA only): judged as a reduced precision, against eager at TF32.
    Precision("tf32", "float32", 2.0**-10, (1e-3, 1e-3)),
)}
TF32 = "tf32"
# int8: static post-training quantization of weights and activations by each backend's own
# quantizer (compare/measure/accuracy.py); the model and its inputs stay fp32 until then.
QUANTIZED_DTYPES = ("int8",)
# Weight-only int8 and int4 (the decode suite): each backend's own recipe quantizes the
# weights of an fp32 model (adapters/weight_only.py); fp32 eager is the reference.
WEIGHT_ONLY = {"int8wo": 8, "int4wo": 4}
DTYPE_NAMES = ("fp32", "bf16", "fp16", TF32) + QUANTIZED_DTYPES + tuple(WEIGHT_ONLY)  # what a run can ask for (--dtype)
# An output's element type names its tolerance; a float32 output is fp32's (TF32 is a math
# mode, not an element type).
_BY_ELEMENT_TYPE = {p.element_type: p for p in PRECISIONS.values() if p.name != TF32}


# Reduced precision: a backend passes when its error against float64 is at most this
# many times eager's own error at the same precision (plus one ulp of the output's
# scale). Fixed tolerances do not scale with depth: a 12-layer bf16 model legitimately
# drifts by far more than a single op.
REDUCED_PRECISION_FACTOR = 4.0


def torch_dtype(name: str):
    """The torch dtype for a --dtype name (torch is imported only when asked); an int8 cell's
    model and inputs are fp32, handed so to each backend's quantizer."""
    import torch

    return torch.float32 if name in QUANTIZED_DTYPES or name in WEIGHT_ONLY else getattr(torch, PRECISIONS[name].element_type)


def reduced_precision_verdict(vs_fp64: dict[str, Any], eager_vs_fp64: dict[str, Any], dtype: str,
                              output_scale: float) -> dict[str, Any]:
    """ok / error / tolerance for one draw of a bf16 or fp16 cell, judged against float64."""
    eager_err = eager_vs_fp64.get("max_abs")
    err = vs_fp64.get("max_abs")
    floor = PRECISIONS[dtype].eps * output_scale
    limit = REDUCED_PRECISION_FACTOR * (eager_err if eager_err is not None and math.isfinite(eager_err) else 0.0) + floor
    tolerance = {"max_abs_vs_fp64": limit, "factor_of_eager_error": REDUCED_PRECISION_FACTOR, "floor": floor}
    if err is None or not math.isfinite(err):
        return {"ok": False, "error": vs_fp64.get("error") or "non-finite output", "tolerance": tolerance}
    if err > limit:
        return {"ok": False, "tolerance": tolerance,
                "error": f"{dtype} error vs float64 {err:.3g} exceeds {REDUCED_PRECISION_FACTOR:g}x eager's own "
                         f"{eager_err:.3g} + {floor:.3g}"}
    return {"ok": True, "error": None, "tolerance": tolerance}


def fp32_verdict(vs_eager: dict[str, Any], vs_fp64: dict[str, Any], eager_vs_fp64: dict[str, Any]) -> dict[str, Any]:
    """One draw of an fp32 cell: it agrees with eager within tolerance, or it is at least as
    close to float64 as eager is (a more accurate backend never fails for disagreeing)."""
    if vs_eager.get("ok"):
        return {"ok": True, "error": None, "tolerance": vs_eager.get("tolerance")}
    err, eager_err = vs_fp64.get("max_abs"), eager_vs_fp64.get("max_abs")
    closer = (vs_fp64.get("error") is None and err is not None and eager_err is not None
              and math.isfinite(err) and err <= eager_err)
    if closer:
        return {"ok": True, "error": None, "tolerance": vs_eager.get("tolerance"),
                "note": f"beyond eager's tolerance, but closer to float64 ({err:.3g}) than eager ({eager_err:.3g})"}
    return {"ok": False, "error": vs_eager.get("error"), "tolerance": vs_eager.get("tolerance")}


def numerics_verdict(dtype: str, checks: dict[str, dict[str, Any]], output_scale: float) -> dict[str, Any]:
    """The verdict on one input draw, from its three comparisons (vs_eager, vs_fp64,
    eager_vs_fp64): each draw is judged with its own eager error, never the worst of another."""
    if dtype == "fp32":
        return fp32_verdict(checks["vs_eager"], checks["vs_fp64"], checks["eager_vs_fp64"])
    return reduced_precision_verdict(checks["vs_fp64"], checks["eager_vs_fp64"], dtype, output_scale)


def merge_worst(worst: dict[str, Any], key: str, check: dict[str, Any]) -> None:
    """Keep the largest errors over draws; ok only if every draw was ok."""
    if key not in worst:
        worst[key] = dict(check)
        return
    acc = worst[key]
    for name in ("max_abs", "max_rel"):
        if check.get(name) is not None:
            acc[name] = max(acc.get(name) or 0.0, check[name])
    if not check.get("ok", False):
        if acc.get("ok", False):
            acc["error"] = check.get("error")
        acc["ok"] = False


def tolerance_for(element_type: str) -> tuple[float, float]:
    """(rtol, atol) for an output of this element type (torch's name); exact for integers."""
    precision = _BY_ELEMENT_TYPE.get(element_type)
    return precision.tolerance if precision else (0.0, 0.0)


def compare_outputs(candidate: Sequence[Any], reference: Sequence[Any]) -> dict[str, Any]:
    """Max abs / max rel error of ``candidate`` against ``reference`` (lists of tensors).

    Relative error uses ``max(|ref|, atol)`` as the denominator so references
    near zero (which make plain relative error explode, as the survey notes)
    do not dominate. NaN or inf where the reference is finite never passes.
    """
    import torch

    if len(candidate) != len(reference):
        return {"ok": False, "error": f"{len(candidate)} outputs, reference has {len(reference)}"}
    max_abs = 0.0
    max_rel = 0.0
    ok = True
    error = None
    tol = None
    for i, (c, r) in enumerate(zip(candidate, reference)):
        c = torch.as_tensor(c).detach().cpu()
        r = torch.as_tensor(r).detach().cpu()
        if tuple(c.shape) != tuple(r.shape):
            return {"ok": False, "error": f"output {i} has shape {tuple(c.shape)}, reference {tuple(r.shape)}"}
        dtype_name = str(r.dtype).replace("torch.", "")
        rtol, atol = tolerance_for(dtype_name if r.is_floating_point() else "int")
        tol = {"rtol": rtol, "atol": atol}
        c64 = c.to(torch.float64)
        r64 = r.to(torch.float64)
        finite_ref = torch.isfinite(r64)
        bad = finite_ref & ~torch.isfinite(c64)
        if bool(bad.any()):
            ok = False
            error = f"output {i} has {int(bad.sum())} non-finite value(s) where the reference is finite"
        if not bool(finite_ref.all()) and error is None:
            error = f"reference output {i} itself has non-finite values"
            ok = False
        diff = (c64 - r64).abs()
        diff = torch.where(finite_ref & torch.isfinite(c64), diff, torch.full_like(diff, math.inf))
        if diff.numel():
            max_abs = max(max_abs, float(diff.max()))
            rel = diff / torch.clamp(r64.abs(), min=max(atol, 1e-12))
            max_rel = max(max_rel, float(rel.max()))
            if bool((diff > atol + rtol * r64.abs()).any()):
                ok = False
                if error is None:
                    worst = int(diff.argmax())
                    error = (
                        f"output {i} differs beyond rtol={rtol:g} atol={atol:g}: "
                        f"max abs {float(diff.max()):.3g} at flat index {worst}"
                    )
    return {"ok": ok, "error": error, "max_abs": max_abs, "max_rel": max_rel, "tolerance": tol}
