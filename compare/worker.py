"""The child process that measures one (workload, backend) cell.

The parent (``compare.runner``) writes a spec file, starts
``python -m compare.worker SPEC RESULT`` in its own process group and waits
with a timeout. The worker reports progress as ``@@dlcompare {json}`` lines on
stdout and writes its result atomically to RESULT. Whatever happens here (an
exception, a crash, a hang) costs only this cell.
"""
from __future__ import annotations

import copy
import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from .measure import torch_dtype

EVENT_PREFIX = "@@dlcompare "


def emit(**event: Any) -> None:
    sys.stdout.write(EVENT_PREFIX + json.dumps(event) + "\n")
    sys.stdout.flush()


OOM_MARKERS = ("can't allocate memory", "Cannot allocate memory", "std::bad_alloc", "out of memory",
               "OutOfMemoryError", "MemoryError", "failed to allocate")


def looks_out_of_memory(text: str) -> bool:
    return any(marker in text for marker in OOM_MARKERS)


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


# ----------------------------------------------------------------------------- memory

def _proc_status_kb(field: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return float(line.split()[1])
    except OSError:
        pass
    return None


def rss_mb() -> float | None:
    kb = _proc_status_kb("VmRSS")
    return kb / 1024 if kb is not None else None


def peak_rss_mb() -> float:
    kb = _proc_status_kb("VmHWM")
    if kb is None:  # not Linux: ru_maxrss (KiB on Linux, bytes on macOS)
        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024 if sys.platform == "darwin" else 1)
    return kb / 1024


def reset_peak_rss() -> bool:
    """Linux lets a process reset its RSS high-water mark (clear_refs = 5)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def apply_memory_limit(limit_mb: int | None) -> None:
    if limit_mb:
        limit = int(limit_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


# ----------------------------------------------------------------------------- the cell

def prepare_worker(spec: dict[str, Any]):
    """Backend and context for this cell; the environment is set before torch loads."""
    from adapters import CompileContext, get_backend

    backend = get_backend(spec["backend"])
    ctx = CompileContext(
        workload_name=spec["workload"],
        workload_key=spec["workload_key"],
        device=spec["device"],
        threads=spec["threads"],
        work_dir=Path(spec["work_dir"]),
        cache=spec.get("cache", "cold"),
        cache_root=Path(spec["cache_root"]) if spec.get("cache_root") else None,
        options=spec.get("options", {}),
        on_phase=lambda name: emit(phase=name),
    )
    # Before torch is imported: cache folders and thread pools read the environment once.
    os.environ.update(backend.process_env(ctx))

    import torch

    torch.set_num_threads(spec["threads"])
    torch.set_float32_matmul_precision("highest")
    return backend, ctx


def cast_floating(tensor, dtype):
    return tensor.to(dtype) if tensor.is_floating_point() else tensor


def measure_cell(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one cell; returns the fields of ``compare.results.Cell``."""
    backend, ctx = prepare_worker(spec)
    if spec.get("experiment") == "dynamic":
        from . import dynamic

        return dynamic.measure(spec, ctx, backend, emit)

    import torch

    from adapters import flatten_outputs
    from adapters.eager import TorchCompiled
    from workloads import build_model, make_inputs, resolve_workloads

    from .measure import (
        NOISY_REL_IQR,
        Timed,
        TimingConfig,
        break_even_calls,
        compare_outputs,
        reduced_precision_verdict,
        speedup_interval,
        time_alternating,
    )

    threads = spec["threads"]
    device = spec["device"]
    seed = spec.get("seed", 0)

    result: dict[str, Any] = {"threads": threads, "backend_versions": backend.versions()}
    emit(phase="setup")
    (workload,) = resolve_workloads([spec["workload"]], spec.get("workload_files", []))
    workload = workload.with_batch(spec.get("batch"))
    dtype_name = spec.get("dtype", "fp32")
    dtype = torch_dtype(dtype_name)
    specs = workload.input_specs(spec["size"])
    # Weights and floating inputs in the cell's precision; eager runs at that precision too.
    model = build_model(workload, spec["size"], seed).to(device=device, dtype=dtype)
    reference_model = build_model(workload, spec["size"], seed).to(device=device, dtype=dtype)
    inputs = [cast_floating(t, dtype) for t in make_inputs(specs, seed, device)]

    # Memory: baseline after model and inputs exist, high-water mark through compile
    # and the first calls (before the eager reference runs in this process).
    rss_baseline = rss_mb()
    peak_reset = reset_peak_rss()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()

    try:
        compiled = backend.compile(model, inputs, ctx)
    except Exception as exc:
        # A compiler that cannot lower the model at reduced precision lacks that support
        # (an exporter without the dtype, no kernels for it, a frontend that types it
        # wrong): the cell is unavailable at this dtype, with the compiler's own words.
        if dtype_name == "fp32" or looks_out_of_memory(str(exc)):
            raise
        traceback.print_exc()
        from adapters import BackendUnavailable

        raise BackendUnavailable(f"{spec['backend']} cannot lower this model in {dtype_name}: "
                                 f"{one_line(exc, 300, keep_end=True)}") from None
    prepared = compiled.prepare(inputs)
    if "first_call" in ctx.phases:
        raw = compiled.run(prepared)
        compiled.synchronize()
    else:
        with ctx.phase("first_call"):
            raw = compiled.run(prepared)
            compiled.synchronize()
    outputs = [o.clone() if hasattr(o, "clone") else o for o in compiled.outputs_to_torch(raw)]
    del raw
    compiled.run(prepared)  # a second call: steady-state buffers count towards the peak
    compiled.synchronize()
    peak = peak_rss_mb()
    result.update(
        compile_phases=dict(ctx.phases),
        compile_s=sum(ctx.phases.values()),
        peak_rss_mb=peak,
        rss_baseline_mb=rss_baseline,
        peak_rss_delta_mb=(peak - rss_baseline) if (peak_reset and rss_baseline is not None) else None,
    )
    if device == "cuda":
        ctx.info["cuda_peak_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20

    # Numerics: against eager fp32 and a float64 eager reference, on several input
    # draws (the first is the timing inputs); the worst case over draws is reported.
    emit(phase="numerics")
    model64 = copy.deepcopy(reference_model).double()
    draws = max(1, int(spec.get("numerics_draws", 1)))
    worst: dict[str, Any] = {}
    output_scale = 0.0
    for draw in range(draws):
        if draw == 0:
            draw_inputs, draw_outputs = inputs, outputs
        else:
            draw_inputs = [cast_floating(t, dtype) for t in make_inputs(specs, seed + 7919 * draw, device)]
            raw = compiled.run(compiled.prepare(draw_inputs))
            compiled.synchronize()
            draw_outputs = [o.clone() if hasattr(o, "clone") else o for o in compiled.outputs_to_torch(raw)]
            del raw
        with torch.no_grad():
            reference = [t.detach() for t in flatten_outputs(reference_model(*draw_inputs))]
            inputs64 = [t.double() if t.is_floating_point() else t for t in draw_inputs]
            reference64 = [t.detach() for t in flatten_outputs(model64(*inputs64))]
        _merge_worst(worst, "vs_eager", compare_outputs(draw_outputs, reference))
        _merge_worst(worst, "vs_fp64", compare_outputs(draw_outputs, reference64))
        _merge_worst(worst, "eager_vs_fp64", compare_outputs(reference, reference64))
        output_scale = max([output_scale] + [float(t.abs().max()) for t in reference64
                                             if t.is_floating_point() and t.numel()])
    del model64
    vs_eager, vs_fp64, eager_vs_fp64 = worst["vs_eager"], worst["vs_fp64"], worst["eager_vs_fp64"]
    # fp32 must agree with eager fp32; reduced precision must be about as accurate as
    # eager at that precision, both measured against float64.
    verdict = vs_eager if dtype_name == "fp32" else reduced_precision_verdict(
        vs_fp64, eager_vs_fp64, dtype_name, output_scale)
    result.update(
        numerics_ok=verdict["ok"],
        numerics_error=verdict.get("error"),
        numerics_draws=draws,
        max_abs_err=vs_eager.get("max_abs"),
        max_rel_err=vs_eager.get("max_rel"),
        tolerance=verdict.get("tolerance"),
        max_abs_err_fp64=vs_fp64.get("max_abs"),
        max_rel_err_fp64=vs_fp64.get("max_rel"),
        eager_max_abs_err_fp64=eager_vs_fp64.get("max_abs"),
    )
    if spec.get("count_work", True):
        from .roofline import count_work

        result["work"] = count_work(reference_model, inputs, reference)

    # Timing: eager reference and candidate alternately, in this same process.
    emit(phase="timing")
    timing = TimingConfig(**spec.get("timing", {}))
    sync = compiled.synchronize
    candidate = Timed(compiled.run, prepared, sync)
    if spec["backend"] == "eager":
        (stats,) = time_alternating([candidate], timing)
        result.update(latency_ms=stats, eager_latency_ms=stats.median, eager_latency=stats, speedup=1.0)
        result["break_even_note"] = "reference"
    else:
        eager = TorchCompiled(reference_model, device)
        ref_timed = Timed(eager.run, eager.prepare(inputs), eager.synchronize)
        ref_stats, stats = time_alternating([ref_timed, candidate], timing)
        speedup = ref_stats.median / stats.median
        result.update(
            latency_ms=stats,
            eager_latency_ms=ref_stats.median,
            eager_latency=ref_stats,
            speedup=speedup,
            speedup_ci=speedup_interval(ref_stats, stats),
        )
        result["break_even_calls"] = break_even_calls(result["compile_s"], ref_stats.median, stats.median)
        if result["break_even_calls"] is None:
            result["break_even_note"] = "never: not faster than eager"
    result["noisy"] = any(s.rel_iqr > NOISY_REL_IQR for s in [stats, result["eager_latency"]])
    # "cold" means built from nothing by construction; a warm cell reports what the
    # backend itself said (ctx.info["cache_evidence"] holds the raw evidence).
    if not backend.compiles:
        result["cache"] = None
    elif ctx.cache == "cold":
        result["cache"] = "cold"
    else:
        result["cache"] = ctx.info.get("cache_result", "miss")
    result["info"] = ctx.info
    result["status"] = "ok"
    return result


def _merge_worst(worst: dict[str, Any], key: str, check: dict[str, Any]) -> None:
    """Keep the largest errors over draws; ok only if every draw was ok."""
    if key not in worst:
        worst[key] = dict(check)
        return
    acc = worst[key]
    for field in ("max_abs", "max_rel"):
        if check.get(field) is not None:
            acc[field] = max(acc.get(field) or 0.0, check[field])
    if not check.get("ok", False):
        if acc.get("ok", False):
            acc["error"] = check.get("error")
        acc["ok"] = False


def _to_jsonable(result: dict[str, Any]) -> dict[str, Any]:
    import dataclasses

    return {k: (dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v) for k, v in result.items()}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec_path, result_path = Path(argv[0]), Path(argv[1])
    spec = json.loads(spec_path.read_text())
    apply_memory_limit(spec.get("memory_limit_mb"))
    from adapters import BackendUnavailable

    from .results import atomic_write_json

    start = time.perf_counter()
    try:
        result = measure_cell(spec)
    except BackendUnavailable as exc:
        result = {"status": "unavailable", "error": str(exc)}
    except MemoryError as exc:
        traceback.print_exc()
        result = {"status": "out_of_memory", "error": f"MemoryError in worker: {exc}".strip()}
    except Exception as exc:  # any backend error costs only this cell
        traceback.print_exc()
        status = "out_of_memory" if looks_out_of_memory(str(exc)) else "failed"
        result = {"status": status, "error": one_line(exc)}
    result["worker_s"] = time.perf_counter() - start
    atomic_write_json(result_path, _to_jsonable(result))
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: some compiler runtimes crash in their atexit
    # handlers, and the result is already safely on disk.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
