"""The LLM decode cell: the worker of the decode scenario (``compare.scenarios.decode``,
which claims the workloads tagged ``workloads.llm.LLM_TAG``: ``--suite llm``).

In the worker, in order: the decoder and its prompt; the backend's imports; its
``prefill`` and ``decode_step`` modules each compiled through the backend's own
``compile`` (the same adapter path as every cell, with a context of its own, so the two
never share a stored artifact); one greedy generation of each side, whose token ids must
agree with eager's; then whole generations of eager and the backend alternately
(``compare.measure.generation``); the token ids once more after timing. The caches are
static: padded to ``max_len``, so every step has the same shapes and nothing recompiles;
the compiles dynamo makes during the generations are counted anyway (``recompiles``).
"""
from __future__ import annotations

import copy
import dataclasses
import time
import traceback
from dataclasses import dataclass
from typing import Any

from compare.measure import memory
from compare.measure.generation import DecodePair, Generation, GenerationSampler, call, generate
from compare.measure.numerics import PRECISIONS, QUANTIZED_DTYPES, WEIGHT_ONLY, torch_dtype
from compare.results import protocol
from compare.results.protocol import CellSpec
from compare.results.roles import REFERENCE_SIDE
from compare.worker import steps

PARTS = ("prefill", "decode")
REDUCED_ELEMENT_TYPES = ("bf16", "fp16")  # read on fp32 eager's sequence (reduced_precision_decode_verdict)
CACHE_STRATEGY = "static-padded"


def measure_cell(spec: CellSpec) -> protocol.CellMeasurement:
    """The decode scenario's worker (``compare.scenarios.decode``): one decode cell."""
    backend, ctx, torch_import_s = steps.prepare_worker(spec)
    return measure(spec, backend, ctx, torch_import_s)


@dataclass
class DecodeSetup:
    """The decoder at this cell's size and precision: the backend's copy, eager's, the prompt."""
    params: dict[str, Any]
    prompt: Any
    model: Any  # handed to the backend (its two modules share these weights)
    reference: Any  # eager: the timing and the token reference
    fp32_reference: Any = None  # bf16/fp16 cells: fp32 eager, whose sequence the tokens are read on

    @classmethod
    def build(cls, spec: CellSpec) -> "DecodeSetup":
        from workloads import build_model, make_inputs, resolve_workloads
        from workloads.llm import with_lengths

        (workload,) = resolve_workloads([spec.workload], list(spec.workload_files))
        workload = with_lengths(workload, spec.prompt_len, spec.gen_len).with_batch(spec.batch)
        dtype = torch_dtype(spec.dtype)
        fp32 = build_model(workload, spec.size, spec.seed).to(device=spec.device)
        reduced = spec.dtype in REDUCED_ELEMENT_TYPES
        model = copy.deepcopy(fp32).to(dtype) if reduced else fp32.to(dtype=dtype)
        reference = copy.deepcopy(model)  # the same weights; a second build from the config takes longer
        (prompt,) = make_inputs(workload.input_specs(spec.size), spec.seed, spec.device)
        return cls(dict(workload.params(spec.size)), prompt, model, reference, fp32 if reduced else None)

    @property
    def new_tokens(self) -> int:
        return int(self.params["new_tokens"])

    def decode_examples(self, prefill) -> list:
        """The decode step's example inputs as the generation will feed them: the compiled
        prefill's own caches and argmax token, at the first free slot (an example of other
        strides, a slice of the prompt, made torch.compile compile the step again)."""
        import torch

        logits, k_cache, v_cache = call(prefill, [self.prompt])
        position = torch.tensor([self.prompt.shape[1]], dtype=torch.int64, device=self.prompt.device)
        return [logits.argmax(-1, keepdim=True), position, k_cache, v_cache]


def part_context(ctx, part: str):
    """The cell's context for one of its two modules: its own cache key and scratch folder,
    so a store never hands one module's artifact to the other."""
    work_dir = ctx.work_dir / part
    work_dir.mkdir(parents=True, exist_ok=True)
    return dataclasses.replace(ctx, workload_key=f"{ctx.workload_key}-{part}", work_dir=work_dir, phases={},
                               info={})


def compile_part(backend, module, examples: list, ctx, part: str, dtype: str = "fp32"):
    """One module through the backend's ``compile`` and one call (phases as the cell's); a
    failure names the module and keeps its kind (unavailable, out of memory, failed). At a
    reduced float precision a compiler that cannot take the module lacks that support: the
    cell is unavailable at that dtype (ORT has no bf16 CPU kernel for the prefill's Expand)."""
    from adapters import BackendUnavailable

    try:
        result = backend.compile(module, examples, ctx)
        phases = dict(ctx.phases if result.phases is None else result.phases)
        if not result.includes_first_call:
            with ctx.phase("first_call"):
                steps.run_once(result.compiled, result.compiled.prepare(examples))
            phases["first_call"] = ctx.phases["first_call"]
        result.phases = phases
        return result
    except BackendUnavailable as exc:
        raise BackendUnavailable(f"{part}: {exc}") from None
    except MemoryError:
        raise
    except Exception as exc:
        if dtype in PRECISIONS:  # a float precision: fp32's failure stays one (dtype_refusal)
            refusal = steps.dtype_refusal(exc, dtype, f"{part}: {getattr(backend, 'name', type(backend).__name__)}")
            if isinstance(refusal, BackendUnavailable):
                raise refusal from None
        traceback.print_exc()
        # chained: the coverage matrix reads the op from the messages behind it (torch.onnx names
        # it in the exception its ConversionError wraps)
        raise RuntimeError(f"{part}: {steps.one_line(exc, 360, keep_end=True)}") from exc


def compile_both(backend, setup: DecodeSetup, ctx, spec: CellSpec, loaded: dict):
    """Both modules compiled under a peak-memory probe: their results by part, the memory figures."""
    with memory.TreePeak() as peak:
        prefill = compile_part(backend, setup.model.prefill_module(), [setup.prompt], part_context(ctx, "prefill"),
                               "prefill", spec.dtype)
        examples = setup.decode_examples(prefill.compiled)
        decode = compile_part(backend, setup.model.decode_module(), examples, part_context(ctx, "decode"), "decode",
                              spec.dtype)
    results = {"prefill": prefill, "decode": decode}
    memory.trim_heap()
    figures = {"peak_rss_mb": peak.peak_self_mb,
               "compile_peak_mb": steps._delta(peak.peak_tree_mb, loaded["rss_after_load_mb"]),
               "compile_children_peak_mb": peak.peak_children_mb,
               "steady_state_mb": steps._delta(memory.rss_mb(), loaded["rss_after_load_mb"])}
    return results, figures


def merged_compile(backend, ctx, results: dict, spec: CellSpec) -> dict[str, Any]:
    """The cell's compile record from its two modules': phases prefixed by module, one cache
    verdict (a hit only where both hit), each module's info."""
    phases = {f"{part}_{name}": s for part in PARTS for name, s in results[part].phases.items()}
    verdicts = {steps.cache_verdict(backend, ctx, results[part], spec.fresh_store) for part in PARTS}
    cache = None if verdicts == {None} else verdicts.pop() if len(verdicts) == 1 else (
        "bypass" if "bypass" in verdicts else "miss")
    tuning = [results[part].tuning_s for part in PARTS]
    return {"compile_phases": phases, "compile_s": sum(phases.values()), "cache": cache,
            "tuning_s": None if None in tuning else sum(t for t in tuning if t is not None),
            "info": {part: steps.cell_info(results[part]) for part in PARTS}}


def eager_pair(setup: DecodeSetup, device: str, model: Any = None) -> DecodePair:
    from adapters.eager import TorchCompiled

    model = setup.reference if model is None else model
    return DecodePair(TorchCompiled(model.prefill_module(), device), TorchCompiled(model.decode_module(), device))


def first_divergence(got: list, expected: list) -> int | None:
    """The first new token (0: the prefill's) whose ids differ; None when all agree."""
    return next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), None)


def check_tokens(pair: DecodePair, reference: DecodePair, setup: DecodeSetup,
                 weight_only: bool = False, dtype: str = "fp32") -> tuple[dict[str, Any], Generation]:
    """One generation of each: the token ids against eager's, and the worst logit error
    over the steps before any divergence (after it the two see different tokens). A
    weight-only cell is expected to part from fp32 eager: it is judged finite, and its
    accuracy is read on eager's own sequence (``next_token_accuracy``). A bf16/fp16 cell is
    read on fp32 eager's sequence beside eager at its precision (``reduced_precision_reading``);
    where it parts from that eager's tokens is still recorded."""
    expected = generate(reference, setup.prompt, setup.new_tokens, keep_logits=True)
    got = generate(pair, setup.prompt, setup.new_tokens, keep_logits=True)
    diverged = first_divergence(got.tokens, expected.tokens)
    agreeing = setup.new_tokens if diverged is None else diverged
    errors = [float((a.double() - b.double()).abs().max()) for a, b in zip(got.logits[:agreeing], expected.logits)]
    finite = all(bool(logits.isfinite().all()) for logits in got.logits)
    accuracy, read = None, {}
    if weight_only:
        from compare.measure.accuracy import next_token_accuracy

        forced = generate(pair, setup.prompt, setup.new_tokens, keep_logits=True, forced=expected.tokens)
        accuracy = next_token_accuracy(forced.logits, expected.logits, setup.params.get("weights"))
    elif setup.fp32_reference is not None:
        read = reduced_precision_reading(pair, reference, setup, dtype)
    error = None
    if read:
        error = read.pop("error")
    elif diverged is not None and not weight_only:
        error = f"generated token ids differ from eager's from new token {diverged} (of {setup.new_tokens})"
    if error is None and (not finite or (accuracy is not None and not accuracy["finite"])):
        error = "non-finite logits"
    record = {"token_ids_agree": diverged is None, "first_divergent_step": diverged,
              "token_ids": got.tokens, "eager_token_ids": expected.tokens,
              **({"accuracy_vs_fp32": accuracy} if accuracy is not None else {}), **read}
    return {"numerics_ok": error is None, "numerics_error": error, "numerics_draws": 1,
            "max_abs_err": max(errors) if errors else None, "decode": record}, got


def reduced_precision_reading(pair: DecodePair, reference: DecodePair, setup: DecodeSetup,
                              dtype: str) -> dict[str, Any]:
    """A bf16/fp16 cell read as the weight-only ones are: the backend and eager at its
    precision each fed fp32 eager's greedy sequence; the backend is judged against eager's
    own agreement (``reduced_precision_decode_verdict``), not on the tokens eager at its
    precision chose (they part within a few steps on random weights)."""
    from compare.measure.accuracy import next_token_accuracy, reduced_precision_decode_verdict

    fp32 = generate(eager_pair(setup, setup.prompt.device.type, setup.fp32_reference), setup.prompt,
                    setup.new_tokens, keep_logits=True)
    weights = setup.params.get("weights")
    sides = {name: generate(p, setup.prompt, setup.new_tokens, keep_logits=True, forced=fp32.tokens)
             for name, p in (("backend", pair), ("eager", reference))}
    accuracy = next_token_accuracy(sides["backend"].logits, fp32.logits, weights)
    eager = next_token_accuracy(sides["eager"].logits, fp32.logits, weights)
    return {"accuracy_vs_fp32": accuracy, "eager_accuracy_vs_fp32": eager, "fp32_token_ids": fp32.tokens,
            "error": reduced_precision_decode_verdict(accuracy, eager, dtype)}


def time_generations(pair: DecodePair, reference: DecodePair, setup: DecodeSetup, spec: CellSpec):
    """Eager's and the backend's generations alternately (eager alone in its own cell), in
    one go or in the slices the parent asks for; per-generation statistics and the parts."""
    # Eager alone in its own cell, unless it runs a weight-only recipe: fp32 eager is then its reference.
    candidates = [pair] if spec.is_reference else [reference, pair]
    sampler = GenerationSampler(candidates, setup.prompt, setup.new_tokens, spec.timing)
    if spec.interleave:
        steps.take_slices(sampler)
    else:
        while not sampler.done():
            sampler.take_rounds(1)
    stats = sampler.stats()
    timed = {"latency": stats[-1], "eager_latency": stats[0], "round_s": sampler.round_s()}
    return timed, {"backend": sampler.parts_ms(-1), REFERENCE_SIDE: sampler.parts_ms(0)}


def dynamo_graphs() -> int:
    """The graphs dynamo has compiled in this process (torch.compile's backends compile
    through it; for the others it stays where it is)."""
    from torch._dynamo.utils import counters

    return int(dict(counters["stats"]).get("unique_graphs", 0))


def after_timing(pair: DecodePair, setup: DecodeSetup, first: Generation) -> dict[str, Any]:
    """The token ids once more after every timed generation (a cache buffer reused wrongly shows here)."""
    again = generate(pair, setup.prompt, setup.new_tokens)
    diverged = first_divergence(again.tokens, first.tokens)
    return {"ok": diverged is None, "max_abs": None,
            "error": None if diverged is None else f"token ids changed from new token {diverged}"}


def decode_record(setup: DecodeSetup, tokens: dict[str, Any], parts: dict, recompiles: int) -> dict[str, Any]:
    """The cell's ``decode`` as measured; ``compare.results.derived.fill_decode`` adds the summaries."""
    p = setup.params
    return {"prompt_len": p["prompt"], "new_tokens": p["new_tokens"], "max_len": p["max_len"], "batch": p["batch"],
            "cache": CACHE_STRATEGY, "compiles": len(PARTS), "recompiles": recompiles, **tokens, "samples": parts}


def measure(spec: CellSpec, backend, ctx, torch_import_s: float) -> protocol.CellMeasurement:
    """Run one decode cell; returns what it measured (the protocol's answer)."""
    from adapters import Backend, BackendUnavailable

    if spec.dtype in QUANTIZED_DTYPES:
        raise BackendUnavailable(f"the LLM decode suite has no {spec.dtype} path (its quantizers take one module "
                                 "with one set of calibration inputs, not a prefill and a decode step); weight-only "
                                 "int8 and int4 are --dtype int8wo and int4wo")
    steps.refuse_tf32(spec, backend)
    bits = WEIGHT_ONLY.get(spec.dtype)
    recipe = None if bits is None else backend.weight_only_recipe(bits)
    if bits is not None and recipe is None:
        raise BackendUnavailable(f"dlcompare has no weight-only {spec.dtype} recipe for {spec.backend}")
    steps.emit(phase="setup")
    setup = DecodeSetup.build(spec)
    steps.emit(phase="import")
    loaded = steps.import_backend(backend, ctx)
    if spec.await_compile:
        steps.await_compile()
    quantize_s = None
    if bits is not None:  # eager's fp32 copy stays the reference
        ctx.weight_bits, ctx.info["weight_only"] = bits, recipe
        if type(backend).quantize_weights is not Backend.quantize_weights:  # a torch recipe: once, for both modules
            start = time.perf_counter()
            setup.model = backend.quantize_weights(setup.model, bits)
            quantize_s = time.perf_counter() - start
    results, figures = compile_both(backend, setup, ctx, spec, loaded)
    compiled = merged_compile(backend, ctx, results, spec)
    if recipe is not None:
        compiled["info"]["weight_only"] = recipe
    if quantize_s is not None:
        compiled["compile_phases"] = {"quantize_weights": quantize_s, **compiled["compile_phases"]}
        compiled["compile_s"] += quantize_s
    pair = DecodePair(results["prefill"].compiled, results["decode"].compiled)
    reference = eager_pair(setup, spec.device)
    graphs_before = dynamo_graphs()
    steps.emit(phase="numerics")
    numerics, first = check_tokens(pair, reference, setup, weight_only=bits is not None, dtype=spec.dtype)
    timed: dict[str, Any] = {}
    parts: dict[str, Any] = {}
    own, after = None, None
    if not spec.coverage_only:  # --coverage-only: the greedy tokens checked against eager's, nothing timed
        steps.emit(phase="timing")
        pair.step.own_timings(reset=True)  # its own counters cover the timed generations (warm-ups included)
        timed, parts = time_generations(pair, reference, setup, spec)
        own = pair.step.own_timings()
        after = after_timing(pair, setup, first)
        if numerics["numerics_ok"] and not after["ok"]:
            numerics.update(numerics_ok=False, numerics_error=f"outputs changed after the timed calls: {after['error']}")
    decode = decode_record(setup, numerics.pop("decode"), parts, dynamo_graphs() - graphs_before)
    if own is not None:
        decode["own_timings"] = own
    return protocol.CellMeasurement(
        status="ok", backend_versions=backend.versions(),
        settings={"threads": spec.threads, **steps.FP32_SETTINGS, "kv_cache": CACHE_STRATEGY,
                  **({"affinity": list(spec.affinity)} if spec.affinity else {}), **backend.settings(ctx)},
        allocator=steps.allocator_in_use(), torch_import_s=torch_import_s, import_s=loaded["import_s"],
        time_to_first_result_s=torch_import_s + (loaded["import_s"] or 0.0) + compiled["compile_s"],
        load_mb=loaded["load_mb"], **compiled, **figures, **numerics, **timed, numerics_after_timing=after,
        decode=decode)
