"""What int8 costs in accuracy, as a user reads it: a quantized cell's outputs against fp32
eager's on the same seeded draws, and the int8 tolerance that decides its ``numerics_ok``
(never fp32's: a quantized model is not expected to agree to 1e-4).

Per draw: the largest absolute difference, the relative error (the L2 norm of the
difference over the L2 norm of fp32's output) and the cosine similarity of the flattened
outputs; for a workload whose output is logits (the classifiers, GPT-2's next token), how
many rows pick the same top-1 class as fp32. Over the draws: the worst of each, and the
top-1 agreement over every row of every draw.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

# The int8 tolerance, per metric (docs/method.md, "int8"): every draw must stay within the
# first two, and the top-1 agreement over all draws must reach the third.
INT8_TOLERANCE = {"cosine_min": 0.98, "rel_err_max": 0.2, "top1_agreement_min": 0.8}
# Workloads whose first output holds class scores in its last dimension (workloads' tags):
# their top-1 agreement is reported. Only a classifier's decides numerics_ok: the issue's
# metric for a language model (GPT-2) is the cosine of its output, and the next token of a
# random-weight decoder wins by margins too thin for its top-1 to say much.
LOGITS_TAG = "logits"
CLASSIFIER_TAG = "classifier"


def _flat(outputs: Sequence[Any]):
    import torch

    floating = [torch.as_tensor(t).detach().cpu().double().reshape(-1) for t in outputs
                if torch.as_tensor(t).is_floating_point()]
    return torch.cat(floating) if floating else torch.zeros(0, dtype=torch.float64)


def draw_accuracy(candidate: Sequence[Any], fp32: Sequence[Any], logits: bool) -> dict[str, Any]:
    """One draw: ``candidate``'s outputs against fp32 eager's."""
    import torch

    c, r = _flat(candidate), _flat(fp32)
    if c.shape != r.shape:
        return {"error": f"{c.numel()} output values, fp32 eager has {r.numel()}"}
    if not bool(torch.isfinite(c).all()):
        return {"error": f"{int((~torch.isfinite(c)).sum())} non-finite output value(s)"}
    diff = c - r
    ref_norm, cand_norm = float(r.norm()), float(c.norm())
    figures: dict[str, Any] = {
        "max_abs": float(diff.abs().max()) if diff.numel() else 0.0,
        "rel_err": float(diff.norm()) / ref_norm if ref_norm else (0.0 if not float(diff.norm()) else math.inf),
        "cosine": float(c @ r) / (ref_norm * cand_norm) if ref_norm and cand_norm else float(ref_norm == cand_norm),
    }
    if logits:
        first_c, first_r = torch.as_tensor(candidate[0]), torch.as_tensor(fp32[0])
        rows_c = first_c.reshape(-1, first_c.shape[-1]).argmax(-1)
        rows_r = first_r.reshape(-1, first_r.shape[-1]).argmax(-1)
        figures["top1_agree"], figures["top1_rows"] = int((rows_c == rows_r).sum()), int(rows_r.numel())
    return figures


def summarize_draws(draws: list[dict[str, Any]]) -> dict[str, Any]:
    """The cell's ``accuracy``: the worst of each figure over the draws."""
    failed = next((d["error"] for d in draws if "error" in d), None)
    if failed:
        return {"reference": "fp32 eager", "draws": len(draws), "error": failed}
    out: dict[str, Any] = {"reference": "fp32 eager", "draws": len(draws),
                           "max_abs": max(d["max_abs"] for d in draws),
                           "rel_err": max(d["rel_err"] for d in draws),
                           "cosine_min": min(d["cosine"] for d in draws)}
    rows = sum(d.get("top1_rows", 0) for d in draws)
    if rows:
        out["top1_agreement"] = sum(d["top1_agree"] for d in draws) / rows
        out["top1_rows"] = rows
    return out


def int8_verdict(accuracy: dict[str, Any], judge_top1: bool = True) -> dict[str, Any]:
    """ok / error / tolerance of an int8 cell, from its ``accuracy`` and ``INT8_TOLERANCE``;
    the top-1 agreement counts only where ``judge_top1`` (a classifier)."""
    tolerance = dict(INT8_TOLERANCE)
    if accuracy.get("error"):
        return {"ok": False, "error": accuracy["error"], "tolerance": tolerance}
    problems = []
    if not accuracy["cosine_min"] >= tolerance["cosine_min"]:
        problems.append(f"cosine similarity to fp32 {accuracy['cosine_min']:.4f} < {tolerance['cosine_min']}")
    if not accuracy["rel_err"] <= tolerance["rel_err_max"]:
        problems.append(f"relative error vs fp32 {accuracy['rel_err']:.3g} > {tolerance['rel_err_max']}")
    top1 = accuracy.get("top1_agreement")
    if judge_top1 and top1 is not None and not top1 >= tolerance["top1_agreement_min"]:
        problems.append(f"top-1 agreement with fp32 {top1:.0%} < {tolerance['top1_agreement_min']:.0%}")
    return {"ok": not problems, "error": "int8 " + "; ".join(problems) if problems else None, "tolerance": tolerance}


# Weight-only int8/int4 on random weights: their near-flat next-token distributions lack a
# trained model's outliers, so these figures say little about a trained model's loss.
RANDOM_WEIGHTS_NOTE = ("random weights: no trained outliers, so quantization error here says little about a trained "
                       "model's")


def next_token_accuracy(logits: Sequence[Any], reference: Sequence[Any], weights: str | None = None) -> dict[str, Any]:
    """A quantized decoder against fp32 eager, fed the same tokens at every step (eager's
    greedy ones): the share of steps whose top-1 next token agrees, and the mean and worst
    KL divergence KL(fp32 || quantized) of the next-token distributions, as llama.cpp's
    perplexity tool reports them. In float64. ``weights``: the folder of a trained model's
    weights, else the model's are random (and the note says what that means)."""
    import torch

    agree, kls = [], []
    for got, ref in zip(logits, reference):
        got, ref = got.double(), ref.double()
        agree.append(float((got.argmax(-1) == ref.argmax(-1)).double().mean()))
        log_ref, log_got = torch.log_softmax(ref, -1), torch.log_softmax(got, -1)
        kls.append(float((log_ref.exp() * (log_ref - log_got)).sum(-1).mean()))
    finite = all(math.isfinite(k) for k in kls)
    return {"top1_agreement": sum(agree) / len(agree) if agree else None,
            "mean_kl": sum(kls) / len(kls) if kls and finite else None,
            "max_kl": max(kls) if kls and finite else None, "steps": len(agree), "finite": finite,
            "note": f"trained weights from {weights}" if weights else RANDOM_WEIGHTS_NOTE}


# A bf16 or fp16 decoder parts from its own eager's greedy tokens within a few steps on
# random weights (summation order decides near-ties), so its tokens are read as the
# weight-only ones are: fed fp32 eager's sequence, top-1 agreement with fp32 eager. The
# backend passes when its agreement is at most this far below eager's at the same precision.
REDUCED_TOP1_MARGIN = 0.05


def reduced_precision_decode_verdict(accuracy: dict[str, Any], eager_accuracy: dict[str, Any],
                                     dtype: str) -> str | None:
    """None when a reduced-precision decoder reads fp32 eager's sequence about as well as
    eager at its precision does; else the reason, in one line."""
    if not accuracy.get("finite", False):
        return "non-finite logits"
    got, eager = accuracy.get("top1_agreement"), eager_accuracy.get("top1_agreement")
    if got is None or eager is None:
        return None
    if got < eager - REDUCED_TOP1_MARGIN:
        return (f"top-1 agreement with fp32 eager {got:.0%}, below {dtype} eager's own {eager:.0%} by more than "
                f"{REDUCED_TOP1_MARGIN:.0%}")
    return None
