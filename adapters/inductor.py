"""TorchInductor through ``torch.compile``.

Compilation is lazy in torch.compile, so the adapter triggers it with one call
on the example inputs and splits that call into phases from dynamo's own
timers: ``trace`` (dynamo + AOT), ``codegen`` (Inductor lowering, C++/Triton
compile) and ``first_call`` (the rest: guards and the first execution).
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Sequence

from .base import (
    Backend,
    BackendOptions,
    CacheVerdict,
    CompileContext,
    CompileResult,
    DelegatingSession,
    option,
    target_key,
)
from .eager import TorchCompiled
from .llm_session import SessionPart, shared_session
from .profiling import KernelProfile, profile_second_build, torch_cuda_profile

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass(frozen=True)
class InductorOptions(BackendOptions):
    inductor_mode: str = option("default", "torch.compile's mode", flag="inductor-mode", choices=MODES)
    # Freezing (weights folded in as constants, then constant-folded and prepacked) is
    # what PyTorch advises for CPU inference with Inductor, and what ORT, TVM and IREE
    # do with weights anyway.
    inductor_freezing: bool = option(True, "Inductor's freezing (weights as constants, folded and prepacked), "
                                     "which PyTorch advises for CPU inference (default on)",
                                     flag="inductor-freezing", kind="switch")
    # Inductor inlines a pointwise buffer into its users unless it reads more than this many
    # buffers or holds a "heavy" op; erf is not one, so GELU's erf can be recomputed in
    # every user (norm_residual). None: PyTorch's default (4).
    inductor_realize_reads_threshold: int | None = option(
        None, "torch._inductor.config.realize_reads_threshold (default: PyTorch's, 4; 1 realizes every reused "
        "pointwise buffer instead of recomputing it in each user)", flag="inductor-realize-reads-threshold",
        kind="positive_int", metavar="N")
    # 'static' by default: 1.50-1.52x eager's tg against the explicit modules' 1.39x on Llama at
    # SmolLM2-135M's shape, in two back-to-back runs (docs/results/2026-12-05-zen4-llm-pp512-tg128-e2d6252.md).
    inductor_llm_cache: str = option(
        "static", "decode suite, transformers decoders: 'static' compiles the model's forward with its own "
        "StaticCache, as transformers documents torch.compile for generation (cache_implementation='static'); "
        "'explicit' compiles the suite's prefill and decode modules (the KV cache as tensors in and out), as "
        "every other compiler takes them. The hand-written toy decoder always takes 'explicit'",
        flag="inductor-llm-cache", choices=("explicit", "static"))
    dynamic: bool = False  # torch.compile(dynamic=...) for the timed cells


# What Inductor's own output code showed on norm_residual (docs/results/2026-12-01-xeon-backend-configs.md).
REALIZATION_NOTE = ("Inductor inlines a reused pointwise buffer into each of its users (recomputing it) unless it "
                    "reads more than realize_reads_threshold (4) buffers or holds exp, log, sigmoid or tanh; erf is "
                    "not among them, so GELU's erf chain is recomputed in the next LayerNorm's two reductions and "
                    "its residual: on norm_residual, --inductor-realize-reads-threshold 1 took Inductor from 0.64x "
                    "to 1.10x of eager on a 2-core Xeon VM")


def inductor_configs(options, quantized: bool = False) -> dict[str, Any]:
    """The Inductor configs a cell sets (recorded; AOTInductor's stored package is keyed on them).
    An int8 cell always freezes: PyTorch's X86 Inductor quantization tutorial lowers the
    quantized patterns to int8 kernels with freezing on."""
    configs: dict[str, Any] = {"freezing": options.inductor_freezing or quantized}
    threshold = getattr(options, "inductor_realize_reads_threshold", None)
    if threshold is not None:
        configs["realize_reads_threshold"] = threshold
    return configs


def cache_evidence(counters) -> dict[str, int]:
    inductor, autograd = dict(counters["inductor"]), dict(counters["aot_autograd"])
    return {"fxgraph_cache_hit": inductor.get("fxgraph_cache_hit", 0),
            "fxgraph_cache_miss": inductor.get("fxgraph_cache_miss", 0),
            "fxgraph_cache_bypass": inductor.get("fxgraph_cache_bypass", 0),
            "autograd_cache_hit": autograd.get("autograd_cache_hit", 0)}


def cache_result(evidence: dict[str, int]) -> str:
    # With freezing on CPU, torch 2.13 bypasses its FX-graph cache ("mkldnn tensors
    # unpickleable": the prepacked weights cannot be saved), so a warm run recompiles.
    # That is Inductor's behaviour, reported as such rather than as a miss.
    if evidence["fxgraph_cache_bypass"]:
        return "bypass"
    return "hit" if evidence["fxgraph_cache_hit"] and not evidence["fxgraph_cache_miss"] else "miss"


def quantize_for_inductor(module: Any, example_inputs: Sequence[Any], ctx: CompileContext) -> Any:
    """int8 (``ctx.calibration``): the PT2E-quantized module, in a ``quantize`` phase, with
    its int8 and fp32 op counts; else the module as it is."""
    if ctx.calibration is None:
        return module
    from . import pt2e

    with ctx.phase("quantize"):
        module = pt2e.quantize(module, example_inputs, ctx.calibration)
    ctx.info["int8_ops"] = pt2e.op_counts(module)
    return module


def _compile_seconds(metrics) -> tuple[float, float]:
    """dynamo's own timers so far: (its whole compile, the backend compiler's share)."""
    return (sum(metrics.get("_compile.compile_inner", [])), sum(metrics.get("OutputGraph.call_user_compiler", [])))


# max-autotune's own timers (select_algorithm's dynamo_timed): each GEMM's candidates
# compiled ("<op>_template_precompiling"), then benchmarked ("<op>_template_autotuning").
AUTOTUNE_TIMERS = ("_template_precompiling", "_template_autotuning")


def _autotune_seconds(metrics) -> float:
    """Seconds max-autotune has spent so far: its tuning, inside the backend compile."""
    return sum(sum(values) for key, values in metrics.items() if key.endswith(AUTOTUNE_TIMERS))


class AutotuneWinners:
    """Which kernel max-autotune picked for each GEMM it benchmarked, as Inductor's own
    feedback hook tells it (``select_algorithm.add_feedback_saver``): the op, its input
    shapes, the winner, its ms and how many candidates were timed."""

    def __init__(self) -> None:
        self.picks: list[dict[str, Any]] = []

    def __call__(self, timings, name, input_nodes, choices, profiled=None, precompile_times=None) -> None:
        timed = {choice: ms for choice, ms in timings.items() if ms != float("inf")}
        if not timed:
            return
        best = min(timed, key=timed.__getitem__)
        self.picks.append({"op": name, "shapes": [[str(d) for d in node.get_size()] for node in input_nodes],
                           # the winner's name leads with its family: cpp (a C++ template), mkl (_mkl_linear), extern (ATen)
                           "winner": (winner := str(getattr(best, "name", best))), "kind": winner.lstrip("_").split("_")[0],
                           "ms": round(float(timed[best]), 5), "candidates": len(timings)})


@contextlib.contextmanager
def autotune_feedback(winners: AutotuneWinners | None):
    """Inductor's autotuning hook installed around the compile (nothing when not autotuning)."""
    if winners is None:
        yield
        return
    from torch._inductor import select_algorithm

    select_algorithm.add_feedback_saver(winners)
    try:
        yield
    finally:
        select_algorithm.clear_feedback_savers()


class InductorCompiled(TorchCompiled):
    """Inductor's output (torch.compile's, or a loaded AOTInductor package); profiled
    through a second build whose kernels carry profiler records (never the timed one),
    after ``warm_calls`` untimed calls (a torch.compile build compiles on its first)."""

    def __init__(self, fn, device: str, profiled_build, warm_calls: int = 2,
                 fact: str = "a second build with config.cpp.enable_kernel_profile"):
        super().__init__(fn, device)
        self._profiled_build, self._warm_calls, self._fact = profiled_build, warm_calls, fact

    def profile(self, prepared: Any, calls: int) -> KernelProfile:
        import dataclasses

        if self._cuda:  # the timed build itself: CUDA kernels are seen by the profiler as they are
            return torch_cuda_profile(self.run, prepared, calls, self.synchronize)
        build = TorchCompiled(self._profiled_build(), "cpu")
        profile = profile_second_build(build.run, prepared, calls, self._warm_calls, self._fact)
        return dataclasses.replace(profile, facts={**profile.facts, "realization": REALIZATION_NOTE})


class StaticCacheSession:
    """A transformers causal LM with its own ``StaticCache`` and its forward compiled by
    Inductor, as transformers documents static-cache generation with torch.compile."""

    def __init__(self, lm: Any, max_len: int, mode: str):
        import torch
        from transformers import StaticCache

        self.lm = lm
        self.cache = StaticCache(config=lm.config, max_cache_len=max_len)
        self.forward = torch.compile(lm.forward, backend="inductor", mode=mode)
        self.empty = torch.empty(0)  # the placeholder caches the decode loop passes back

    def eval(self, ids, start: int):
        import torch

        if start == 0:
            self.cache.reset()
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)
        with torch.no_grad():
            out = self.forward(input_ids=ids, cache_position=positions, position_ids=positions.unsqueeze(0),
                               past_key_values=self.cache, use_cache=True)
        return out.logits[:, -1]


class StaticCacheCompiled(SessionPart):
    """A part on the static-cache session, fed its token ids as the tensor they arrive in."""

    def prepare(self, inputs: Sequence[Any]) -> Any:
        return inputs[0], 0 if self.part == "prefill" else int(inputs[1].reshape(-1)[0])


class InductorBackend(Backend):
    name = "inductor"
    tf32_math = True
    rank = 10
    description = "TorchInductor via torch.compile (C++/OpenMP on CPU, Triton on CUDA)"
    reproducer = """\
import torch._inductor.config
torch._inductor.config.freezing = True
with torch.no_grad():
    print(torch.compile(model)(*inputs))
"""
    packages = ("torch",)
    devices = ("cpu", "cuda")
    options_type = InductorOptions
    runtime_modules = ("torch._dynamo", "torch._inductor.compile_fx", "torch._inductor.codegen.cpp",
                       "torch._inductor.scheduler")
    quantizes = True  # int8: the PT2E-quantized model compiled, freezing on (adapters/pt2e.py)

    @classmethod
    def gemm_probe(cls):
        def make(n: int):
            import torch

            a, w = torch.randn(n, n), torch.randn(n, n)
            packed = torch.ops.mkldnn._reorder_linear_weight(w, n)  # as freezing packs a linear's weight
            return lambda: torch.ops.mkldnn._linear_pointwise(a, packed, None, "none", [], "")
        return "oneDNN (mkldnn._linear_pointwise)", make
    quantizer_modules = ("torchao",)

    def required_modules(self) -> tuple[str, ...]:
        return ("torch",)

    def weight_only_recipe(self, bits: int) -> dict[str, Any] | None:
        from .weight_only import torchao_recipe

        return torchao_recipe(bits)

    def quantize_weights(self, module: Any, bits: int) -> Any:
        from .weight_only import torchao_weight_only

        return torchao_weight_only(module, bits)

    def _compile_static_cache(self, module: Any, example_inputs: Sequence[Any], ctx: CompileContext) -> CompileResult:
        """The decoder's own forward compiled once, with transformers' StaticCache held by a
        session the prefill and the decode step share; each part's first call compiles its shape."""
        import torch._inductor.config

        configs = inductor_configs(ctx.options)
        for name, value in configs.items():
            setattr(torch._inductor.config, name, value)
        session, part = shared_session(module, example_inputs, "Inductor's StaticCache path", lambda decoder:
                                       StaticCacheSession(decoder.lm, decoder.max_len, ctx.options.inductor_mode))
        compiled = StaticCacheCompiled(session, part)
        with ctx.phase("compile"):
            compiled.run(compiled.prepare(example_inputs))
        ctx.info.update(inductor_mode=ctx.options.inductor_mode, inductor_configs=configs,
                        llm_cache="transformers StaticCache, forward compiled (cache_implementation='static')")
        return CompileResult(compiled, info=ctx.info, phases={"compile": ctx.phases["compile"]},
                             includes_first_call=True)

    @classmethod
    def status_notes(cls, info: dict[str, Any], tuning_s: float | None) -> list[str]:
        """max-autotune: how many GEMMs it benchmarked, its seconds (counted as tuning) and
        which kinds of kernel won."""
        autotune = info.get("autotune")
        if not autotune:
            return []
        kinds = sorted({pick["kind"] for pick in autotune["gemms"]})
        won = f", won by {', '.join(kinds)}" if kinds else ""
        return [f"max-autotune: {len(autotune['gemms'])} GEMMs in {autotune['seconds']:.0f} s of tuning{won}"]

    def settings(self, ctx: CompileContext) -> dict[str, Any]:
        import torch._inductor.config as config

        from .pt2e import pt2e_settings

        return {"mode": ctx.options.inductor_mode, "freezing": ctx.options.inductor_freezing or bool(ctx.calibration),
                **({"quantizer": pt2e_settings()} if ctx.calibration else {}),
                "realize_reads_threshold": ctx.options.inductor_realize_reads_threshold or config.realize_reads_threshold,
                "dynamic": ctx.options.dynamic, "cpp_wrapper": bool(config.cpp_wrapper),
                "fx_graph_cache": bool(config.fx_graph_cache), "no_grad": True}

    def process_env(self, ctx: CompileContext) -> dict[str, str]:
        # Inductor reads its cache folder from the environment: a fresh folder per
        # cell is a cold compile, the persistent store a warm one.
        if ctx.cache == "warm":
            folder = ctx.persistent_dir(self.name, target_key(ctx.device, ctx.threads, self.versions()))
        else:
            folder = ctx.work_dir / "inductor-cache"
        return {"TORCHINDUCTOR_CACHE_DIR": str(folder), "TRITON_CACHE_DIR": str(folder / "triton")}

    def compile(self, module: Any, example_inputs: Sequence[Any], ctx: CompileContext) -> CompileResult:
        import torch
        import torch._dynamo
        import torch._inductor.config
        from torch._dynamo.utils import compilation_time_metrics, counters

        if type(module).__name__ in ("HFPrefill", "HFDecodeStep"):
            if getattr(ctx.options, "inductor_llm_cache", "static") == "static":
                return self._compile_static_cache(module, example_inputs, ctx)
            ctx.info["llm_cache"] = "explicit: the suite's prefill and decode modules, the KV cache as tensors"
        mode = ctx.options.inductor_mode
        if mode not in MODES:
            raise ValueError(f"unknown inductor mode {mode!r} (known: {', '.join(MODES)})")
        # The runner points TORCHINDUCTOR_CACHE_DIR at a fresh folder (cold) or the
        # persistent store (warm) before torch is imported; record where it went.
        ctx.info["inductor_cache_dir"] = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        ctx.info["inductor_mode"] = mode
        configs = inductor_configs(ctx.options, quantized=ctx.calibration is not None)
        for name, value in configs.items():
            setattr(torch._inductor.config, name, value)
        ctx.info["inductor_configs"] = configs
        module = quantize_for_inductor(module, example_inputs, ctx)
        before = _compile_seconds(compilation_time_metrics)  # torch.export inside the quantizer is not Inductor's
        tuned_before = _autotune_seconds(compilation_time_metrics)
        compiled = torch.compile(module, backend="inductor", mode=mode, dynamic=ctx.options.dynamic)

        winners = AutotuneWinners() if mode.startswith("max-autotune") else None
        with ctx.phase("compile"), autotune_feedback(winners):
            with torch.no_grad():
                compiled(*example_inputs)
            if ctx.device == "cuda":
                torch.cuda.synchronize()
        # torch.compile compiles on the first call: split that call with dynamo's own timers.
        total = ctx.phases["compile"]
        compile_inner, backend_compile = (a - b for a, b in zip(_compile_seconds(compilation_time_metrics), before))
        autotune = min(_autotune_seconds(compilation_time_metrics) - tuned_before, backend_compile)
        phases = {"trace": max(compile_inner - backend_compile, 0.0),
                  **({"autotune": autotune} if autotune > 0 else {}), "codegen": backend_compile - autotune,
                  "first_call": max(total - compile_inner, 0.0)}
        if winners is not None:  # max-autotune's search is tuning: counted as such in the break-even
            ctx.info["autotune"] = {"seconds": round(autotune, 3), "gemms": winners.picks}
        if "quantize" in ctx.phases:
            phases = {"quantize": ctx.phases["quantize"], **phases}
        evidence = cache_evidence(counters)
        ctx.info["graphs"] = dict(counters["stats"]).get("unique_graphs", 0)
        ctx.info["graph_breaks"] = sum(dict(counters["graph_break"]).values())
        compiled_model = InductorCompiled(compiled, ctx.device, lambda: self._profiled_build(module, mode, ctx))
        return CompileResult(compiled_model, cache=CacheVerdict(cache_result(evidence), evidence),
                             info=ctx.info, phases=phases, includes_first_call=True,
                             tuning_s=autotune if winners is not None else None)

    @staticmethod
    def _profiled_build(module: Any, mode: str, ctx: CompileContext):
        """The same model built again with a profiler record around each generated kernel
        (``config.cpp.enable_kernel_profile``): the timed build has none, as they cost time."""
        import torch
        import torch._dynamo
        import torch._inductor.config

        torch._dynamo.reset()
        torch._inductor.config.cpp.enable_kernel_profile = True
        return torch.compile(module, backend="inductor", mode=mode, dynamic=ctx.options.dynamic)

    def dynamic_session(self, module, example_inputs, dynamic_dims, strategy, ctx):
        import torch
        import torch._dynamo
        import torch._inductor.config
        from torch._dynamo.utils import counters

        # specialize: dynamo recompiles for every new shape (its cap lifted, and no
        # automatic switch to dynamic); symbolic: one graph with symbolic sizes.
        torch._dynamo.config.recompile_limit = 1024
        torch._dynamo.config.automatic_dynamic_shapes = False
        torch._inductor.config.freezing = ctx.options.inductor_freezing
        compiled = torch.compile(module, backend="inductor", dynamic=(strategy == "symbolic"))
        return DelegatingSession(self, TorchCompiled(compiled, ctx.device),
                                 count=lambda: dict(counters["stats"]).get("unique_graphs", 0))
