"""Decode: greedy generation with a static KV cache, the way the decoder workloads
(``--suite llm``, tagged ``workloads.llm.LLM_TAG``) are measured. The scenario claims
those workloads: their cells run it whatever the run's scenario, and ``--suite llm`` runs
it. Its worker is ``compare.worker.decode`` (prefill and decode step compiled by the
backend, whole generations of eager and the backend alternated); this module declares it,
derives llama-bench's rates and the TTFT/TPOT figures from its samples
(``cell.scenario.decode``), and gives its CSV columns and report table."""
from __future__ import annotations

import statistics
from typing import Any

from compare.measure.stats import request_percentiles
from compare.results.derived import rate_figure, rate_speedup
from compare.results.roles import REFERENCE_SIDE
from compare.results.schema import Cell, RunResults
from compare.scenarios.base import ReportSection, Scenario


class Decode(Scenario):
    name = "decode"
    rank = 50
    help = ("greedy generation with a static KV cache, prefill and decode tokens/s (llama-bench's pp and tg), "
            "TTFT and TPOT against eager's in the same worker; the decoder workloads (--suite llm) always run it")
    worker = "compare.worker.decode:measure_cell"
    claims_workloads = True

    def claims(self, tags: tuple[str, ...]) -> bool:
        from workloads.llm import LLM_TAG

        return LLM_TAG in tags

    def derive(self, cell: Cell, config: dict[str, Any]) -> None:
        fill_decode(cell)

    def csv_columns(self, cell: Cell) -> dict[str, Any]:
        return decode_columns(cell.scenario.decode)

    def sections(self, results: RunResults) -> list[ReportSection]:
        rows = decode_rows(results)
        title = decode_title(results) if rows else "LLM decode"
        return [ReportSection(title, rows, DECODE_NOTE, rich_title=title)]


def _fmt_ms_or_dash(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def bench_rates(parts: dict[str, list[float]], decode: dict[str, Any]) -> dict[str, list[float]]:
    """llama-bench's two rates per timed generation: ``pp``, prompt tokens per second of
    its prefill (time to first token), and ``tg``, tokens per second of its decode steps
    (the ``new_tokens - 1`` steps after the first token), each times the batch."""
    batch, steps = decode.get("batch", 1), decode["new_tokens"] - 1
    pp = [decode["prompt_len"] * batch / (ms / 1e3) for ms in parts["ttft_ms"] if ms > 0]
    step_ms = parts["step_ms"]
    chunks = [step_ms[i:i + steps] for i in range(0, len(step_ms), steps)] if steps > 0 else []
    tg = [steps * batch / (sum(chunk) / 1e3) for chunk in chunks if len(chunk) == steps and sum(chunk) > 0]
    return {"pp": pp, "tg": tg}




def decode_summary(parts: dict[str, list[float]], generation_ms: float, decode: dict[str, Any]) -> dict[str, Any]:
    """One side's decode figures: the median time to first token, the per-step p50 and p99
    (observed steps, pooled over every timed generation; p99 needs 100 steps, else None),
    the tokens of a generation (over the batch) per second of its median, and llama-bench's
    pp and tg rates over generations (``rate_figure``)."""
    steps = parts["step_ms"]
    pct = request_percentiles(steps) if steps else {"p50": None, "p99": None, "n": 0}
    tokens = decode["new_tokens"] * decode.get("batch", 1)
    rates = bench_rates(parts, decode)
    return {"ttft_ms": statistics.median(parts["ttft_ms"]) if parts["ttft_ms"] else None,
            "tpot_ms": {"p50": pct["p50"], "p99": pct["p99"], "n": pct["n"]},
            "tokens_per_s": tokens / (generation_ms / 1e3) if generation_ms else None,
            "pp_tokens_per_s": rate_figure(rates["pp"]), "tg_tokens_per_s": rate_figure(rates["tg"])}


def fill_decode(cell: Cell) -> None:
    """The backend's and the in-cell eager's decode figures from the pooled
    samples (the cell's latency and eager latency are whole generations)."""
    decode, samples = cell.scenario.decode, (cell.scenario.decode or {}).get("samples")
    if decode is None or not samples or cell.latency is None or cell.eager_latency is None:
        return
    decode.update(decode_summary(samples["backend"], cell.latency.median, decode))
    decode[REFERENCE_SIDE] = decode_summary(samples[REFERENCE_SIDE], cell.eager_latency.median, decode)
    if not cell.is_reference:
        rates, eager = bench_rates(samples["backend"], decode), bench_rates(samples[REFERENCE_SIDE], decode)
        for name in ("pp", "tg"):
            decode[f"{name}_speedup"] = rate_speedup(rates[name], eager[name], cell.spread.process_samples)




def decode_columns(decode: dict[str, Any] | None) -> dict[str, Any]:
    """The decode figures as CSV columns (none for other cells)."""
    if not decode:
        return {}
    row = {f"decode_{name}": decode.get(name) for name in ("prompt_len", "new_tokens", "max_len", "cache",
                                                            "recompiles", "token_ids_agree", "first_divergent_step")}
    for prefix, side in (("decode", decode), ("decode_eager", decode.get(REFERENCE_SIDE) or {})):
        tpot = side.get("tpot_ms") or {}
        row.update({f"{prefix}_ttft_ms": side.get("ttft_ms"), f"{prefix}_tpot_p50_ms": tpot.get("p50"),
                    f"{prefix}_tpot_p99_ms": tpot.get("p99"), f"{prefix}_tokens_per_s": side.get("tokens_per_s")})
        for rate in ("pp", "tg"):
            figure = side.get(f"{rate}_tokens_per_s") or {}
            row.update({f"{prefix}_{rate}_tokens_per_s_median": figure.get("median"),
                        f"{prefix}_{rate}_tokens_per_s_mean": figure.get("mean"),
                        f"{prefix}_{rate}_tokens_per_s_sd": figure.get("sd")})
    own = decode.get("own_timings") or {}  # the runtime's own counters (llama.cpp)
    row.update({"decode_own_pp_tokens_per_s": own.get("pp_tokens_per_s"),
                "decode_own_tg_tokens_per_s": own.get("tg_tokens_per_s")})
    accuracy = decode.get("accuracy_vs_fp32") or {}
    row.update({"decode_top1_agreement_vs_fp32": accuracy.get("top1_agreement"),
                "decode_mean_kl_vs_fp32": accuracy.get("mean_kl"),
                "decode_eager_top1_agreement_vs_fp32": (decode.get("eager_accuracy_vs_fp32") or {}).get("top1_agreement")})
    for rate in ("pp", "tg"):
        speedup = decode.get(f"{rate}_speedup") or {}
        ci = speedup.get("ci") or [None, None]
        row.update({f"decode_{rate}_speedup": speedup.get("value"), f"decode_{rate}_speedup_lo": ci[0],
                    f"decode_{rate}_speedup_hi": ci[1]})
    return row


def _decode_side(decode: dict[str, Any]) -> dict[str, str]:
    tpot = decode.get("tpot_ms") or {}
    return {"pp t/s": _fmt_rate(decode.get("pp_tokens_per_s")), "tg t/s": _fmt_rate(decode.get("tg_tokens_per_s")),
            "TTFT ms": _fmt_ms_or_dash(decode.get("ttft_ms")), "TPOT p50 ms": _fmt_ms_or_dash(tpot.get("p50")),
            "TPOT p99 ms": _fmt_ms_or_dash(tpot.get("p99"))}


def _fmt_rate(figure: dict[str, Any] | None) -> str:
    """The median over generations, the statistic of 'vs eager' beside it (an older record: its mean)."""
    value = (figure or {}).get("median", (figure or {}).get("mean"))
    return "-" if value is None else f"{value:.1f}"


def _fmt_rate_speedup(speedup: dict[str, Any] | None) -> str:
    if not speedup:
        return "-"
    lo, hi = speedup["ci"]
    return f"{speedup['value']:.2f}x [{lo:.2f}, {hi:.2f}]"


def _decode_tokens(decode: dict[str, Any]) -> str:
    accuracy = decode.get("accuracy_vs_fp32")
    if accuracy:  # weight-only, bf16 and fp16: read on fp32 eager's sequence
        kl = accuracy.get("mean_kl")
        weights = "trained" if str(accuracy.get("note", "")).startswith("trained") else "random"
        eager = decode.get("eager_accuracy_vs_fp32")  # bf16/fp16: eager at the cell's precision, read alike
        beside = f" (eager at this precision {eager['top1_agreement']:.0%})" if eager else ""
        parted = ("" if not eager or decode.get("token_ids_agree")
                  else f"; parts from its eager's tokens at {decode.get('first_divergent_step')}")
        return (f"vs fp32 eager: top-1 {accuracy['top1_agreement']:.0%}{beside}, mean KL "
                f"{'-' if kl is None else f'{kl:.3g}'} ({weights} weights){parted}")
    if decode.get("token_ids_agree"):
        return "agree"
    return f"differ from token {decode.get('first_divergent_step')}"


def _own_rates(own: dict[str, Any] | None) -> str:
    """The runtime's own prompt and generation rates (llama.cpp's counters), where it keeps them."""
    if not own or own.get("pp_tokens_per_s") is None or own.get("tg_tokens_per_s") is None:
        return "-"
    return f"{own['pp_tokens_per_s']:.4g} / {own['tg_tokens_per_s']:.4g}"




def decode_rows(results: RunResults) -> list[dict[str, Any]]:
    """Per decode cell, the backend's figures, the in-cell eager's, and whether
    the greedy token ids agree with eager's."""
    rows = []
    for cell in results.cells:
        decode = cell.scenario.decode
        if cell.status != "ok" or not decode or "ttft_ms" not in decode:
            continue
        eager = {f"eager {k}": "-" if cell.is_reference else v
                 for k, v in _decode_side(decode.get(REFERENCE_SIDE) or {}).items() if k in ("pp t/s", "tg t/s")}
        rows.append({"workload": cell.label, "backend": cell.backend, **_decode_side(decode), **eager,
                     "pp vs eager": _fmt_rate_speedup(decode.get("pp_speedup")),
                     "tg vs eager": _fmt_rate_speedup(decode.get("tg_speedup")),
                     "steps": (decode.get("tpot_ms") or {}).get("n"), "token ids": _decode_tokens(decode),
                     "its own pp/tg t/s": _own_rates(decode.get("own_timings")),
                     "recompiles": decode.get("recompiles")})
    if all(row["its own pp/tg t/s"] == "-" for row in rows):  # no runtime here keeps its own counters
        for row in rows:
            del row["its own pp/tg t/s"]
    return rows


def decode_title(results: RunResults) -> str:
    """The decode table's title: prompt length, new tokens and cache length (those of the
    first decode cell; a run has one size)."""
    decode = next(c.scenario.decode for c in results.cells if c.scenario.decode)
    return (f"LLM decode (prompt {decode['prompt_len']} tokens, {decode['new_tokens']} new tokens, "
            f"max length {decode['max_len']}, batch {decode.get('batch', 1)}, KV cache {decode['cache']})")


DECODE_NOTE = ("Greedy generation: a prefill of the prompt gives the first token (TTFT: its median), then one "
               "decode step per further token (TPOT: p50 and p99 over every timed step, p99 from 100 steps). "
               "Both modules are compiled by the backend with static shapes, the KV cache padded to the "
               "maximum length, so nothing recompiles ('recompiles' counts dynamo's compiles during the "
               "generations). Converting inputs and outputs between steps, and the argmax, are inside the "
               "clock, for eager too. The median over the timed generations, the statistic of 'vs eager': pp "
               "t/s = prompt tokens x batch / the prefill's time (time to first token), tg t/s = the decode "
               "steps x batch / their time (llama-bench's tg starts from an empty context; here it follows the "
               "prompt; its mean ± sd, as llama-bench reports, are in results.csv). 'vs eager': the backend's "
               "median rate over eager's median, with its 95 % interval (the generations of a round paired). "
               "Whole generations of eager and the backend alternate in the same workers; the cell table's "
               "latency is one generation.")
