"""The child process that measures one (workload, backend) cell.

The parent (``compare.harness.runner``) writes a spec file, starts
``python -m compare.worker SPEC RESULT`` in its own process group and waits
with a timeout. The worker reports progress as ``@@dlcompare {json}`` lines on
stdout and writes its result atomically to RESULT. Whatever happens here (an
exception, a crash, a hang) costs only this cell.

One cell, in order: import torch; build the model and inputs; import the
backend (``import`` phase, its memory is ``load``); compile and call twice
(phases, ``compile peak`` memory with child processes); ``steady state``
memory; numerics on every draw; eager and the backend timed alternately; the
outputs checked once more after timing. A ``--coverage-only`` cell stops after its
numerics, and calls the backend once (``CellSpec.coverage_only``).
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compare.measure import memory
from compare.measure.cpus import parse_cpu_list
from compare.measure.numerics import QUANTIZED_DTYPES, TF32, WEIGHT_ONLY, torch_dtype
from compare.results import protocol
from compare.results.protocol import CellSpec
from compare.results.roles import REFERENCE_SIDE
from compare.scenarios import scenario
from workloads.zoo import guard_torchvision

PHASE = {"last": "start"}  # the phase this worker last announced: where a failure happened


def emit(**event: Any) -> None:
    if "phase" in event:
        PHASE["last"] = event["phase"]
    sys.stdout.write(protocol.encode_event(**event))
    sys.stdout.flush()


def one_line(exc: BaseException, limit: int = 400, keep_end: bool = False) -> str:
    """The error in one line of at most ``limit`` characters. ``keep_end``: compilers that
    reject a type state why at the end of a long message (after a dump of the op), so keep
    the type, then the end of the last line."""
    text = f"{type(exc).__name__}: {exc}".strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()] or [type(exc).__name__]
    if keep_end:
        head = f"{type(exc).__name__}: "
        last = lines[-1].removeprefix(head)
        room = limit - len(head)
        return head + (last if len(last) <= room else "..." + last[-(room - 3):])
    first = lines[0]
    # Compiler errors often put the useful line last; keep the first and hint at more.
    if len(lines) > 1:
        first += " [...]"
    return first if len(first) <= limit else first[: limit - 3] + "..."


def apply_memory_limit(limit_mb: int | None) -> None:
    import resource

    if limit_mb:
        limit = int(limit_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def allocator_in_use() -> str:
    """Which malloc serves this process, read from its own memory map (an LD_PRELOADed
    jemalloc, tcmalloc or mimalloc shows there), with the glibc settings it runs under."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        maps = ""
    for name in ("jemalloc", "tcmalloc", "mimalloc"):
        if f"lib{name}" in maps:
            return name
    tuned = {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}
    return "glibc" + (" (" + ", ".join(f"{k}={v}" for k, v in sorted(tuned.items())) + ")" if tuned else "")


def thread_pinning(process_cpus: set[int]) -> dict[str, Any]:
    """How many of this process's threads are bound, right now, to fewer CPUs than the
    process was given (a backend's own pinning), read from /proc."""
    pinned, total, main = 0, 0, False
    for status in Path("/proc/self/task").glob("*/status"):
        with contextlib.suppress(OSError, StopIteration):  # a thread that ended meanwhile
            line = next(x for x in status.read_text().splitlines() if x.startswith("Cpus_allowed_list:"))
            cpus = set(parse_cpu_list(line.split(":", 1)[1]))
            total += 1
            if cpus < process_cpus:
                pinned += 1
                main = main or status.parent.name == str(os.getpid())
    return {"threads": total, "pinned": pinned, "main_thread_pinned": main}


# Seconds of calls, after timing, while the pinning is read.
PINNING_WATCH_S = 0.3


def pinning_during_calls(compiled, prepared, process_cpus: set[int], first=None) -> tuple[dict[str, Any], Any]:
    """The most threads seen pinned while the artifact runs, read every 10 ms from a
    watcher thread: OpenVINO's TBB pins a worker when it enters the arena and unpins it
    when it leaves, so an idle process shows none of its pinning. ``first`` (the
    after-timing check, one call) runs under the watch, then calls follow until
    ``PINNING_WATCH_S`` has passed: a slow artifact pays no extra call. Returns the
    pinning seen and what ``first`` returned."""
    import threading

    seen = [thread_pinning(process_cpus)]
    done = threading.Event()

    def watch():
        while not done.wait(0.01):
            seen.append(thread_pinning(process_cpus))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    end = time.perf_counter() + PINNING_WATCH_S
    result = None
    try:
        if first is not None:
            result = first()
        while time.perf_counter() < end:
            compiled.run(prepared)
            compiled.synchronize()
    finally:
        done.set()
        watcher.join()
    return max(seen, key=lambda s: s["pinned"]), result


# ----------------------------------------------------------------------------- steps

# Imported by every worker, the eager-only one included, before anything is timed: every
# compiler here goes through them (torch.export, dynamo), and a process that has imported
# them ran eager 8-15 % faster than one that had not (norm_residual, interleaved in one
# run: importing torch._dynamo -7.9 %, sympy alone -8.8 %, torch.export -10.3 %, nothing
# +0.2 %), so the eager-only reference, which imported nothing else, ran ~11 % slower
# than every in-cell eager (docs/method.md, "The same process state for every cell").
COMMON_MODULES = ("torch.export", "torch._dynamo")


def prepare_worker(spec: CellSpec):
    """Backend, context and torch's import seconds; the environment is set before torch loads."""
    from adapters import CompileContext, get_backend

    if spec.work_dir is None:
        raise ValueError("the cell spec has no work_dir: the parent sets it when it starts the worker")
    scenario(spec.scenario).before_torch(spec)
    backend = get_backend(spec.backend)
    ctx = CompileContext(
        workload_name=spec.workload,
        workload_key=spec.workload_key,
        device=spec.device,
        threads=spec.threads,
        work_dir=Path(spec.work_dir),
        cache=spec.cache,
        cache_root=Path(spec.cache_root),
        store_root=Path(spec.store_root) if spec.store_root else None,
        options=backend.typed_options(spec.options),
        seed=spec.seed,
        scenario=spec.scenario,
        tf32=spec.dtype == TF32,
        on_phase=lambda name: emit(phase=name),
    )
    # Before torch is imported: cache folders and thread pools read the environment once.
    os.environ.update(backend.process_env(ctx))
    start = time.perf_counter()
    import torch

    guard_torchvision(torch.__version__)  # before any library imports it (transformers, timm)
    for name in COMMON_MODULES:
        importlib.import_module(name)
    torch_import_s = time.perf_counter() - start
    torch.set_num_threads(spec.threads)
    float32_math(torch, spec.dtype)
    return backend, ctx, torch_import_s


# fp32 is IEEE fp32 on every device: matmuls at "highest", and cuDNN's convolutions without
# TF32, which PyTorch turns on by default (an H200 run's fp32 conv missed atol 1e-4 by 6x).
# --dtype tf32 asks for TF32 on both, as PyTorch's own "high" precision does for matmuls.
FP32_SETTINGS = {"float32_matmul_precision": "highest", "cudnn_allow_tf32": False}
TF32_SETTINGS = {"float32_matmul_precision": "high", "cudnn_allow_tf32": True}


def float32_math(torch, dtype: str) -> dict:
    """Set how torch computes fp32 matmuls and convolutions in this worker; returns what it set."""
    settings = TF32_SETTINGS if dtype == TF32 else FP32_SETTINGS
    torch.set_float32_matmul_precision(settings["float32_matmul_precision"])
    torch.backends.cudnn.allow_tf32 = settings["cudnn_allow_tf32"]
    return settings


def refuse_tf32(spec: CellSpec, backend) -> None:
    """A --dtype tf32 cell of a backend without TF32 math would only repeat its fp32 cell."""
    if spec.dtype == TF32 and not backend.tf32_math:
        from adapters import BackendUnavailable

        raise BackendUnavailable(f"{spec.backend} has no TF32 math mode: its fp32 cell is what it runs")


def cast_floating(tensor, dtype):
    return tensor.to(dtype) if tensor.is_floating_point() else tensor


# --dtype int8: the calibration batches are seeded draws of the workload's own inputs,
# their seeds this far from the evaluation draws' (seed + EVAL_SEED_STRIDE * index).
CALIBRATION_SEED_OFFSET = 1_000_003
EVAL_SEED_STRIDE = 7919
# An int8 cell's accuracy is read over at least this many evaluation draws (top-1 agreement
# needs more than one row).
INT8_MIN_DRAWS = 8


def calibration_seeds(seed: int, batches: int, eval_draws: int) -> list[int]:
    """The calibration batches' seeds; refused when one would repeat an evaluation draw."""
    seeds = [seed + CALIBRATION_SEED_OFFSET + i for i in range(batches)]
    overlap = set(seeds) & {seed + EVAL_SEED_STRIDE * i for i in range(eval_draws)}
    if overlap:
        raise ValueError(f"calibration seeds {sorted(overlap)} repeat evaluation draws: use fewer draws or batches")
    return seeds


@dataclass
class CellSetup:
    """The workload at this cell's size, batch and precision: models and inputs."""

    workload: Any
    specs: list
    dtype_name: str
    dtype: Any
    model: Any  # handed to the backend
    reference_model: Any  # eager: the timing reference and the numerics reference
    inputs: list
    # int8 cells: fp32 eager (the accuracy reference, timed beside the cell too), the
    # calibration batches every backend's quantizer gets, and their record.
    fp32_model: Any = None
    calibration: list | None = None
    calibration_record: dict[str, Any] | None = None

    @classmethod
    def build(cls, spec: CellSpec) -> "CellSetup":
        from workloads import build_model, make_inputs, resolve_workloads

        (workload,) = resolve_workloads([spec.workload], list(spec.workload_files))
        workload = workload.with_batch(spec.batch)
        dtype_name = spec.dtype
        dtype = torch_dtype(dtype_name)
        specs = workload.input_specs(spec.size)
        seed, device = spec.seed, spec.device
        # Weights and floating inputs in the cell's precision; eager runs at that precision too.
        model = build_model(workload, spec.size, seed).to(device=device, dtype=dtype)
        # A copy, not a second seeded build: the same weights, and a zoo LLM's build from its
        # config takes 5-10 s where the copy takes 1 (Qwen2.5-0.5B here).
        reference = copy.deepcopy(model)
        inputs = [cast_floating(t, dtype) for t in make_inputs(specs, seed, device)]
        setup = cls(workload, specs, dtype_name, dtype, model, reference, inputs)
        if dtype_name in QUANTIZED_DTYPES:
            setup.quantized_reference(spec)
        return setup

    def quantized_reference(self, spec: CellSpec) -> None:
        """int8: draw the calibration batches, keep fp32 eager, and make the reference the
        PT2E-quantized model run in eager (adapters/pt2e.py)."""
        from adapters import artifacts, pt2e
        from workloads import make_inputs

        seeds = calibration_seeds(spec.seed, spec.calibration_batches, self.draw_count(spec))
        self.calibration = [make_inputs(self.specs, s, spec.device) for s in seeds]
        self.calibration_record = {"batches": len(seeds), "seeds": [seeds[0], seeds[-1]],
                                   "sha256": artifacts.tensors_sha256(self.calibration),
                                   "drawn_from": "the workload's make_inputs, seeds apart from the evaluation draws"}
        self.fp32_model = self.reference_model
        self.reference_model = pt2e.quantize(self.fp32_model, self.inputs, self.calibration)

    def draw_count(self, spec: CellSpec) -> int:
        """Input draws the numerics read: int8 cells at least ``INT8_MIN_DRAWS``."""
        draws = max(1, spec.numerics_draws)
        return max(draws, INT8_MIN_DRAWS) if self.dtype_name in QUANTIZED_DTYPES else draws

    @property
    def logits(self) -> bool:
        from compare.measure.accuracy import LOGITS_TAG

        return LOGITS_TAG in self.workload.tags

    @property
    def classifier(self) -> bool:
        from compare.measure.accuracy import CLASSIFIER_TAG

        return CLASSIFIER_TAG in self.workload.tags

    def draw(self, index: int, seed: int, device: str) -> list:
        """Input draw ``index`` (0: the timing inputs)."""
        from workloads import make_inputs

        if index == 0:
            return self.inputs
        return [cast_floating(t, self.dtype) for t in make_inputs(self.specs, seed + EVAL_SEED_STRIDE * index, device)]


def import_backend(backend, ctx) -> dict[str, float | None]:
    """The ``import`` phase: the backend's own modules, timed, and the RSS they add."""
    memory.trim_heap()
    before = memory.rss_mb()
    start = time.perf_counter()
    for name in backend.runtime_modules:
        importlib.import_module(name)
    import_s = time.perf_counter() - start
    memory.trim_heap()
    after = memory.rss_mb()
    return {"import_s": import_s, "load_mb": _delta(after, before), "rss_after_load_mb": after}


def run_once(compiled, prepared) -> list:
    """One call, its outputs copied to torch (so later calls cannot overwrite them)."""
    raw = compiled.run(prepared)
    compiled.synchronize()
    return [o.clone() if hasattr(o, "clone") else o for o in compiled.outputs_to_torch(raw)]


def compile_step(backend, setup: CellSetup, ctx, spec: CellSpec, loaded: dict):
    """Compile and call twice, under a peak-memory probe that covers child processes.
    Returns the backend's CompileResult (its phases final, the first call's included),
    the prepared inputs, the first outputs and the memory figures. A coverage-only cell
    calls once: its memory figures leave out the steady-state buffers of a second call."""
    import torch

    if spec.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    ctx.calibration = setup.calibration
    with memory.TreePeak() as peak:
        try:
            result = backend.compile(setup.model, setup.inputs, ctx)
        except Exception as exc:
            raise dtype_refusal(exc, setup.dtype_name, spec.backend) from None
        prepared = result.compiled.prepare(setup.inputs)
        phases = dict(ctx.phases if result.phases is None else result.phases)
        if result.includes_first_call:
            outputs = run_once(result.compiled, prepared)
        else:
            with ctx.phase("first_call"):
                outputs = run_once(result.compiled, prepared)
            phases["first_call"] = ctx.phases["first_call"]
        result.phases = phases
        if not spec.coverage_only:
            run_once(result.compiled, prepared)  # a second call: steady-state buffers count towards the peak
    base = loaded["rss_after_load_mb"]
    figures = {
        "peak_rss_mb": peak.peak_self_mb,
        "compile_peak_mb": _delta(peak.peak_tree_mb, base),
        "compile_children_peak_mb": peak.peak_children_mb,
    }
    if spec.device == "cuda":
        result.info["cuda_peak_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return result, prepared, outputs, figures


def dtype_refusal(exc: Exception, dtype_name: str, backend: str) -> Exception:
    """A compiler that cannot lower the model at reduced precision lacks that support (an
    exporter without the dtype, no kernels for it, a frontend that types it wrong): the
    cell is unavailable at this dtype, with the compiler's own words."""
    if dtype_name == "fp32" or protocol.looks_out_of_memory(str(exc)):
        return exc
    traceback.print_exc()
    from adapters import BackendUnavailable

    return BackendUnavailable(f"{backend} cannot lower this model in {dtype_name}: "
                              f"{one_line(exc, 300, keep_end=True)}")


def steady_memory(compiled, prepared, loaded: dict) -> dict[str, float | None]:
    """What the warmed-up callable keeps resident, and the transient peak of one call."""
    memory.trim_heap()
    resident = memory.rss_mb()
    reset = memory.reset_peak_rss()
    run_once(compiled, prepared)
    call_peak = memory.peak_rss_mb() - resident if (reset and resident is not None) else None
    return {"steady_state_mb": _delta(resident, loaded["rss_after_load_mb"]), "call_peak_mb": call_peak}


class Float64Reference:
    """The float64 eager outputs of each input draw: read from the run's shared folder
    (``spec.reference_dir``) where an earlier worker of this workload stored them, else
    computed on a float64 twin of the model, built only then, and stored for the next. At
    published sizes the twin doubles a worker's memory (Qwen2.5-0.5B: 4 GB): a workload's
    first worker makes it, and the others of an interleaved group, alive at once, do not.
    None for an ONNX file, which runs as written and has no twin.

    Where an op of the twin has no float64 kernel (``torch._grouped_mm`` of a
    mixture-of-experts decoder), that op alone runs in fp32 (``fp32_fallback``) and
    ``fp32_ops`` names it; the others stay float64. ``fp32_ops`` is None when a draw read
    from the shared folder did not say."""

    def __init__(self, setup: CellSetup, spec: CellSpec):
        quantized = setup.fp32_model is not None
        self._source = None if getattr(setup.reference_model, "onnx_path", None) is not None else (
            setup.fp32_model if quantized else setup.reference_model)
        self._model64: Any = None
        self._fallback = False  # a float64 call needed fp32_fallback: the later ones run under it
        self._folder = Path(spec.reference_dir) if spec.reference_dir else None
        self._key = f"{spec.workload_key}-seed{spec.seed}"
        self.shared = 0  # draws read from the shared folder
        self.fp32_ops: set[str] | None = set()

    @property
    def exists(self) -> bool:
        return self._source is not None

    def record(self) -> dict[str, Any]:
        """``info.float64_reference`` less its draws."""
        return {"shared": self.shared, "fp32_ops": None if self.fp32_ops is None else sorted(self.fp32_ops)}

    def outputs(self, index: int, draw_inputs: list) -> list | None:
        import torch

        if self._source is None:
            return None
        path = self._folder / f"{self._key}-draw{index}.pt" if self._folder else None
        if path is not None and path.exists():
            self.shared += 1
            stored = torch.load(path)
            ops = stored.get("fp32_ops") if isinstance(stored, dict) else None
            self.fp32_ops = None if ops is None or self.fp32_ops is None else self.fp32_ops | set(ops)
            return stored["outputs"] if isinstance(stored, dict) else stored
        if self._model64 is None:
            self._model64 = copy.deepcopy(self._source).double()
        inputs64 = [t.double() if t.is_floating_point() else t for t in draw_inputs]
        out, ops = self._run(inputs64)
        if self.fp32_ops is not None:
            self.fp32_ops |= ops
        if path is not None:
            with contextlib.suppress(OSError):  # no shared folder here (another node): nothing to share
                path.parent.mkdir(parents=True, exist_ok=True)
                partial = path.with_suffix(f".{os.getpid()}.tmp")
                torch.save({"outputs": out, "fp32_ops": sorted(ops)}, partial)
                partial.replace(path)
        return out

    def _run(self, inputs64: list) -> tuple[list, set[str]]:
        """The twin's outputs and the ops of this call that ran in fp32. Plainly first (no
        dispatch mode: nothing changes for a model float64 runs); when that raises, once
        more under ``fp32_fallback``, as every later draw then runs. When that fails too,
        the plain call's error is raised: an eager failure stays one."""
        import torch

        from adapters import flatten_outputs

        def call() -> list:
            with torch.no_grad():
                return [t.detach() for t in flatten_outputs(self._model64(*inputs64))]

        def in_fp32_where_needed() -> tuple[list, set[str]]:
            mode = fp32_fallback()
            with mode:
                out = call()
            return out, mode.ops

        if self._fallback:
            return in_fp32_where_needed()
        try:
            return call(), set()
        except (RuntimeError, NotImplementedError) as plain:
            try:
                found = in_fp32_where_needed()
            except Exception:
                raise plain from None
            self._fallback = True
            return found


def fp32_fallback():
    """A dispatch mode that runs each aten op as called and, where one raises with a
    float64 tensor among its inputs (no float64 kernel: ``aten._grouped_mm`` on CPU), runs
    it again with its float64 tensors (and a float64 ``dtype`` argument) made fp32 and
    makes its fp32 outputs float64 again; ``ops`` names those ops. An op that writes its
    inputs or returns a view of them is not retried (a copy would lose the write or the
    alias), nor one that fails in fp32 as well: its own error is raised."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves, tree_map

    def down(x):
        if isinstance(x, torch.Tensor) and x.dtype == torch.float64:
            return x.float()
        return torch.float32 if x is torch.float64 else x

    def up(x):
        return x.double() if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x

    failed = object()

    class Fp32Fallback(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: set[str] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            try:
                return func(*args, **kwargs)
            except (RuntimeError, NotImplementedError):
                if func._schema.is_mutable or func.is_view or not any(
                        isinstance(x, torch.Tensor) and x.dtype == torch.float64 for x in tree_leaves((args, kwargs))):
                    raise
                args32, kwargs32 = tree_map(down, (args, kwargs))
                try:
                    out = func(*args32, **kwargs32)
                except Exception:
                    out = failed
                if out is failed:
                    raise  # the float64 call's own error
            self.ops.add(str(func))
            return tree_map(up, out)

    return Fp32Fallback()


def check_numerics(compiled, setup: CellSetup, outputs: list, spec: CellSpec) -> dict[str, Any]:
    """Against eager at the cell's precision and a float64 eager reference, on several
    input draws (the first is the timing inputs); each draw is judged on its own, the
    errors reported are the worst over draws. An int8 cell is judged instead on its
    ``accuracy`` against fp32 eager, by the int8 tolerance (compare/measure/accuracy.py)."""
    from compare.measure.accuracy import draw_accuracy, int8_verdict, summarize_draws
    from compare.measure.numerics import merge_worst

    quantized = setup.fp32_model is not None
    reference64 = Float64Reference(setup, spec)
    draws = setup.draw_count(spec)
    worst: dict[str, Any] = {}
    verdicts, accuracy_draws = [], []
    for index in range(draws):
        draw_inputs = setup.draw(index, spec.seed, spec.device)
        draw_outputs = outputs if index == 0 else run_once(compiled, compiled.prepare(draw_inputs))
        checks, verdict, fp32_outputs = _check_draw(setup, reference64, index, draw_inputs, draw_outputs)
        verdicts.append(verdict)
        if quantized:
            accuracy_draws.append(draw_accuracy(draw_outputs, fp32_outputs, setup.logits))
        for key, check in checks.items():
            merge_worst(worst, key, check)
    accuracy = summarize_draws(accuracy_draws) if quantized else None
    if accuracy is not None:
        verdicts = [int8_verdict(accuracy, judge_top1=setup.classifier)]
    failed = next((v for v in verdicts if not v["ok"]), None)
    vs_eager, vs_fp64, eager64 = worst["vs_eager"], worst["vs_fp64"], worst["eager_vs_fp64"]
    return {
        "numerics_ok": failed is None,
        "numerics_error": failed.get("error") if failed else None,
        "numerics_draws": draws,
        "max_abs_err": vs_eager.get("max_abs"),
        "max_rel_err": vs_eager.get("max_rel"),
        "tolerance": verdicts[0].get("tolerance"),
        "max_abs_err_fp64": vs_fp64.get("max_abs"),
        "max_rel_err_fp64": vs_fp64.get("max_rel"),
        "eager_max_abs_err_fp64": eager64.get("max_abs"),
        "accuracy": accuracy,
        "float64_reference": {"draws": draws, **reference64.record()} if reference64.exists else None,
    }


def _check_draw(setup: CellSetup, reference64: Float64Reference, index: int, draw_inputs: list, draw_outputs: list):
    """One draw's three comparisons (vs_eager, vs_fp64, eager_vs_fp64), its verdict at the
    cell's precision, and fp32 eager's outputs (int8 cells; else None)."""
    import torch

    from adapters import flatten_outputs
    from compare.measure.numerics import compare_outputs, numerics_verdict

    with torch.no_grad():
        reference = [t.detach() for t in flatten_outputs(setup.reference_model(*draw_inputs))]
        fp32 = None if setup.fp32_model is None else [t.detach() for t in flatten_outputs(setup.fp32_model(*draw_inputs))]
    outputs64 = reference64.outputs(index, draw_inputs)
    reference64_or_eager = reference if outputs64 is None else outputs64
    no_fp64 = {"ok": False, "error": "no float64 reference (an ONNX file runs as written)"}
    checks = {"vs_eager": compare_outputs(draw_outputs, reference),
              "vs_fp64": no_fp64 if outputs64 is None else compare_outputs(draw_outputs, outputs64),
              "eager_vs_fp64": no_fp64 if outputs64 is None else compare_outputs(reference, outputs64)}
    scale = max([0.0] + [float(t.abs().max()) for t in reference64_or_eager if t.is_floating_point() and t.numel()])
    # int8's verdict is taken over all draws from their accuracy; fp32's per draw here
    verdict = numerics_verdict("fp32" if setup.fp32_model is not None else setup.dtype_name, checks, scale)
    return checks, verdict, fp32


def count_cell_work(setup: CellSetup, spec: CellSpec) -> dict[str, Any]:
    """The roofline's FLOPs and minimum bytes of the cell's model, from an eager call."""
    if not spec.count_work:
        return {}
    import torch

    from adapters import flatten_outputs
    from compare.measure.work import count_work

    model = setup.fp32_model if setup.fp32_model is not None else setup.reference_model  # int8: the model's own work
    with torch.no_grad():
        outputs = [t.detach() for t in flatten_outputs(model(*setup.inputs))]
    return {"work": count_work(model, setup.inputs, outputs)}


def time_against_eager(compiled, prepared, setup: CellSetup, spec: CellSpec) -> dict[str, Any]:
    """Eager and the backend alternately in this process (eager alone in eager's own cell),
    in one go, or in slices the parent asks for (``spec.interleave``). An int8 cell also
    times fp32 eager in the same rounds (``fp32_eager_latency``): its speedup over fp32
    eager comes from the same alternated pairs as the one over int8 eager. The run's
    scenario says what is timed of each side (``Scenario.timed_sides``); what each side
    ran with is returned as ``scenario_sides``."""
    from adapters.eager import TorchCompiled
    from compare.measure.timing import AlternatingSampler

    def eager_side(model):
        eager = TorchCompiled(model, spec.device)
        return eager, eager.prepare(setup.inputs)

    # the order: [int8 eager (not in eager's own cell)], [fp32 eager (int8 cells)], the backend
    sides = {"backend": (compiled, prepared)}
    if setup.fp32_model is not None:
        sides = {"fp32_eager": eager_side(setup.fp32_model), **sides}
    if not spec.is_reference:
        sides = {REFERENCE_SIDE: eager_side(setup.reference_model), **sides}
    candidates, recorded = scenario(spec.scenario).timed_sides(sides, spec)
    sampler = AlternatingSampler(candidates, spec.timing)
    if spec.interleave:
        take_slices(sampler)
    else:
        while not sampler.done():
            sampler.take_rounds(1)
    stats = dict(zip(sides, sampler.stats()))
    return {"latency": stats["backend"], "eager_latency": stats.get(REFERENCE_SIDE, stats["backend"]),
            "fp32_eager_latency": stats.get("fp32_eager"), "round_s": sampler.round_s(), "scenario_sides": recorded}


def await_compile() -> None:
    """Report that the imports are done, then wait for the parent's word to compile: the
    processes of a warm round import at the same time and compile one at a time, so their
    warm starts are timed on a quiet machine (protocol.compile_command)."""
    emit(imported=True)
    emit(phase="waiting to compile")
    line = sys.stdin.readline()
    if not line or not json.loads(line).get("compile"):
        raise RuntimeError("the parent ended the worker before it compiled")


def take_slices(sampler) -> None:
    """Timing in slices: report ready, then take as many rounds as each command on stdin
    asks for, until told to finish. Between slices this process sleeps on stdin while the
    other cells of the workload take theirs."""
    emit(ready={"round_s": sampler.round_s()})
    for line in sys.stdin:  # protocol.rounds_command / finish_command
        command = json.loads(line)
        if command.get("finish"):
            return
        sampler.take_rounds(int(command["rounds"]))
        emit(slice={"rounds": sampler.rounds, "done": sampler.done(), "round_s": sampler.round_s()})


def check_after_timing(compiled, prepared, outputs: list) -> dict[str, Any]:
    """The outputs once more after every timed call: a backend whose state drifts across
    calls (a buffer reused wrongly, an in-place update) shows here."""
    from compare.measure.numerics import compare_outputs

    again = run_once(compiled, prepared)
    check = compare_outputs(again, outputs)
    return {"ok": check["ok"], "max_abs": check.get("max_abs"), "error": check.get("error")}


def cache_verdict(backend, ctx, result, fresh_store: bool = False) -> str | None:
    """"cold" means built from nothing by construction (a cold cell, or the first process of
    one, whose store was made empty for it); a warm cell reports what the backend itself
    said (a backend without a store rebuilt: "miss")."""
    if not backend.compiles:
        return None
    if ctx.cache == "cold" or fresh_store:
        return "cold"
    return result.cache.result if result.cache else "miss"


def cell_info(result) -> dict[str, Any]:
    """The facts the backend reported, with its cache evidence (``info.cache_evidence``)."""
    if result.cache is None or not result.cache.evidence:
        return dict(result.info)
    return {**result.info, "cache_evidence": result.cache.evidence}


def profile_kernels(compiled, prepared, median_ms: float, spec: CellSpec) -> dict[str, Any] | None:
    """The backend's own kernel profile (``--explain``), after timing and the numerics
    re-check: about two seconds of calls (3 to 50). A backend without one says why; a
    profiler that fails costs the profile, never the cell's measured figures."""
    if not spec.explain:
        return None
    calls = max(3, min(50, int(2000 / max(median_ms, 1e-3))))
    found = own_instrument("profile", "the profiler", lambda: compiled.profile(prepared, calls))
    return found if "unavailable" in found else {**found, "timed_median_ms": median_ms}


def own_instrument(phase: str, what: str, call) -> dict[str, Any]:
    """A backend's own instrument (profiler, benchmark tool) after timing, as plain data; one
    that is missing says why, and one that fails costs its own field, never the cell's figures."""
    from adapters.profiling import ProfileUnavailable

    emit(phase=phase)
    try:
        return dataclasses.asdict(call())
    except ProfileUnavailable as exc:
        return {"unavailable": str(exc)}
    except Exception as exc:  # noqa: BLE001 - any instrument error: the cell keeps its figures
        return {"unavailable": f"{what} failed: {one_line(exc)}"}


def gemm_libraries(compiled, prepared, setup: CellSetup, spec: CellSpec) -> dict[str, Any] | None:
    """Which library ran the cell's GEMMs and convolutions (one untimed call of eager under
    torch.profiler says which kinds the graph holds); None where the backend cannot say."""
    if spec.device != "cpu" or not spec.count_work:
        return None  # read from the graph like the counted work: the first process's are the cell's
    from adapters.eager import TorchCompiled
    from adapters.libraries import torch_libraries

    try:
        eager = TorchCompiled(setup.reference_model, spec.device)
        kinds = set(torch_libraries(eager.run, eager.prepare(setup.inputs)))
        return compiled.libraries(prepared, kinds) if kinds else {}
    except Exception as exc:  # noqa: BLE001 - a graph that cannot be read costs this field only
        return {"unknown": one_line(exc)}


# Seconds each backend's own benchmark tool times the artifact for (--crosscheck).
CROSSCHECK_S = 2.0


def crosscheck_cell(compiled, prepared, median_ms: float, spec: CellSpec) -> dict[str, Any] | None:
    """The artifact re-timed by its backend's own benchmark tool (``--crosscheck``), after
    timing: its median and its ratio to this process's timed median. A tool that is missing
    or fails costs the cross-check, never the cell's figures."""
    if not spec.crosscheck:
        return None
    found = own_instrument("crosscheck", "the tool", lambda: compiled.crosscheck(prepared, CROSSCHECK_S))
    return found if "unavailable" in found else {**found, "ratio": found["median_ms"] / median_ms}


def measure_cell(spec: CellSpec) -> protocol.CellMeasurement:
    """Run one cell; returns what it measured (the protocol's answer)."""
    process_cpus = os.sched_getaffinity(0)  # before any backend's pool binds a thread
    backend, ctx, torch_import_s = prepare_worker(spec)
    return measure_prepared(spec, backend, ctx, torch_import_s, process_cpus)


def measure_prepared(spec: CellSpec, backend, ctx, torch_import_s: float, process_cpus: set[int]) -> protocol.CellMeasurement:
    """One cell once ``prepare_worker`` has set up the process."""
    if spec.dtype in WEIGHT_ONLY:
        from adapters import BackendUnavailable

        raise BackendUnavailable(f"weight-only {spec.dtype} is measured on the decode suite (--suite llm)")
    if spec.dtype in QUANTIZED_DTYPES and (missing := backend.int8_missing()):
        from adapters import BackendUnavailable

        raise BackendUnavailable(f"{spec.backend} has no {spec.dtype} path: {missing}")
    refuse_tf32(spec, backend)
    emit(phase="setup")
    setup = CellSetup.build(spec)
    emit(phase="import")
    loaded = import_backend(backend, ctx)
    if spec.await_compile:
        await_compile()
    result, prepared, outputs, compile_memory = compile_step(backend, setup, ctx, spec, loaded)
    compiled = result.compiled
    compile_s = sum(result.phases.values())
    steady = {} if spec.coverage_only else steady_memory(compiled, prepared, loaded)
    emit(phase="numerics")
    numerics = {**check_numerics(compiled, setup, outputs, spec), **count_cell_work(setup, spec)}
    float64_reference = numerics.pop("float64_reference")
    # --coverage-only: no timing, nor what serves it (profile, cross-check, libraries, pinning)
    timed, timed_info = ({}, {}) if spec.coverage_only else time_cell(compiled, prepared, outputs, setup, spec,
                                                                      process_cpus, numerics)
    figures: dict[str, Any] = {**compile_memory, **steady, **numerics, **timed}  # named as the measurement's fields
    return protocol.CellMeasurement(
        status="ok",
        backend_versions=backend.versions(),
        settings={"threads": spec.threads, **FP32_SETTINGS,
                  **({"affinity": list(spec.affinity)} if spec.affinity else {}), **backend.settings(ctx),
                  **({"calibration": setup.calibration_record} if setup.calibration_record else {})},
        allocator=allocator_in_use(),
        torch_import_s=torch_import_s,
        import_s=loaded["import_s"],
        compile_phases=result.phases,
        compile_s=compile_s,
        time_to_first_result_s=torch_import_s + (loaded["import_s"] or 0.0) + compile_s,
        tuning_s=result.tuning_s,
        load_mb=loaded["load_mb"],
        **figures,
        cache=cache_verdict(backend, ctx, result, spec.fresh_store),
        info={**cell_info(result), **timed_info,
              **({"float64_reference": float64_reference} if float64_reference else {}),
              **({"build_note": note} if (note := getattr(setup.model, "build_note", None)) else {})},
    )


def time_cell(compiled, prepared, outputs: list, setup: CellSetup, spec: CellSpec, process_cpus: set[int],
              numerics: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The cell timed against eager, then what serves its timing: the scenario's figures, the
    backend's own instruments, the GEMM libraries, the threads' pinning and the outputs
    checked once more after the timed calls (a change fails ``numerics``, in place).
    Returns (the measurement's fields, the entries of its ``info``)."""
    emit(phase="timing")
    timed = time_against_eager(compiled, prepared, setup, spec)
    emit(phase="after timing")
    batch = setup.workload.batch_of(spec.size) if spec.batch is None else spec.batch
    scenario_info = scenario(spec.scenario).cell_info(timed.pop("scenario_sides"), batch)
    scenario_figures = scenario(spec.scenario).after_timing(compiled, prepared, setup, spec, timed, emit)
    profile = profile_kernels(compiled, prepared, timed["latency"].median, spec)
    crosscheck = crosscheck_cell(compiled, prepared, timed["latency"].median, spec)
    libraries = gemm_libraries(compiled, prepared, setup, spec)
    pinning, after = pinning_during_calls(compiled, prepared, process_cpus,
                                          first=lambda: check_after_timing(compiled, prepared, outputs))
    if numerics["numerics_ok"] and not after["ok"]:
        numerics.update(numerics_ok=False, numerics_error=f"outputs changed after the timed calls: {after['error']}")
    fields = {**timed, "numerics_after_timing": after, "profile": profile, "crosscheck": crosscheck,
              "gemm_library": libraries, **scenario_figures}
    return fields, {"thread_pinning": pinning, **scenario_info}


def _delta(value: float | None, base: float | None) -> float | None:
    return None if value is None or base is None else value - base


ERROR_TEXT_CHARS = 4000  # of the exception chain's messages: where a frontend names the op it cannot take


def failure_info(exc: BaseException, backend: str | None = None) -> dict[str, Any]:
    """Where a cell failed, for the coverage matrix: the phase, the exception's type and
    module (torch.export's and dynamo's own errors say the export failed), its first line,
    and the messages of it and of the exceptions behind it (OpenVINO names the op on a later
    line, torch.onnx in the exception its own wraps); with ``backend``, that backend's
    verdict on them (``Backend.classify_failure``), which the report reads."""
    info: dict[str, Any] = {"failed_phase": PHASE["last"], "exception": f"{type(exc).__module__}.{type(exc).__name__}",
            "first_error_line": (str(exc).strip().splitlines() or [""])[0][:300],
            "error_text": "\n".join(exception_chain(exc))[:ERROR_TEXT_CHARS]}
    if backend:
        from adapters import backend_class

        info["verdict"] = dataclasses.asdict(backend_class(backend).classify_failure(info, one_line(exc)))
    return info


def exception_chain(exc: BaseException | None, depth: int = 5) -> list[str]:
    """``Type: message`` of the exception and of those it was raised from, outermost first."""
    messages: list[str] = []
    while exc is not None and len(messages) < depth:
        messages.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return messages


def main(argv: list[str] | None = None, measure=measure_cell) -> int:
    """``python -m compare.worker SPEC RESULT``: ``measure`` the spec's cell, write its result."""
    argv = sys.argv[1:] if argv is None else argv
    spec_path, result_path = Path(argv[0]), Path(argv[1])
    spec = CellSpec.from_json(spec_path.read_text())
    apply_memory_limit(spec.memory_limit_mb)
    if spec.affinity:  # --affinity: this process and every thread and child it makes
        os.sched_setaffinity(0, spec.affinity)
    from adapters import BackendUnavailable
    from compare.results.schema import atomic_write_json

    start = time.perf_counter()
    try:
        result = measure(spec)
    except BackendUnavailable as exc:
        result = protocol.ended("unavailable", str(exc))
    except MemoryError as exc:
        traceback.print_exc()
        result = protocol.ended("out_of_memory", f"MemoryError in worker: {exc}".strip(), info=failure_info(exc))
    except Exception as exc:  # any backend error costs only this cell
        traceback.print_exc()
        status = "out_of_memory" if protocol.looks_out_of_memory(str(exc)) else "failed"
        result = protocol.ended(status, one_line(exc), info=failure_info(exc, spec.backend))
    result = dataclasses.replace(result, worker_s=time.perf_counter() - start)
    atomic_write_json(result_path, result.to_dict())
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: some compiler runtimes crash in their atexit
    # handlers, and the result is already safely on disk.
    os._exit(0)

