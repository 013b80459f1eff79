"""ExecuTorch with the XNNPACK delegate: torch.export -> ``to_edge_transform_and_lower``
(XnnpackPartitioner) -> ``.to_executorch()`` -> .pte -> the ExecuTorch runtime (Python bindings).

Phases: ``export`` (torch.export), ``lower`` (edge dialect, XNNPACK partitioning and
lowering), ``serialize`` (the ExecuTorch program and its .pte bytes), ``load`` (the runtime
loads the program and its ``forward`` method), ``first_call``.

What XNNPACK does not take runs on ExecuTorch's portable kernels: the cell records the
share of the graph's ops that was delegated and the ops that fell back. A program whose
ops are not all in the Core ATen opset fails to lower (``SpecViolationError``).
Threads: XNNPACK's pthreadpool, reset to the run's threads before the method loads; its
size as the threadpool reports it is recorded. Warm start: the stored, hash-checked .pte.
"""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Sequence

from . import artifacts
from .base import Backend, BackendUnavailable, CacheVerdict, CompileContext, Compiled, CompileResult
from .profiling import KernelProfile, ProfileUnavailable

PTE = "model.pte"
DELEGATION = "delegation.json"  # stored beside the .pte: a hit reports the same delegation as the build


class ExecutorchCompiled(Compiled):
    def __init__(self, method, keep_alive, delegation: dict[str, Any] | None = None):
        self._method = method
        self._keep_alive = keep_alive  # the program must outlive its method
        self._delegation = delegation or {}

    def prepare(self, inputs: Sequence[Any]) -> Any:
        return [t.detach().contiguous() for t in inputs]

    def run(self, prepared: Any) -> Any:
        return self._method.execute(prepared)

    def outputs_to_torch(self, outputs: Any) -> list[Any]:
        # The runtime's outputs live in its planned memory, which the next call overwrites.
        return [out.clone() for out in outputs]

    def libraries(self, prepared: Any, kinds: set[str]) -> dict[str, str] | None:
        return delegated_libraries(self._delegation.get("portable_fallback", {}), kinds)

    def profile(self, prepared: Any, calls: int) -> KernelProfile:
        # Checked: a program loaded with enable_etdump=True writes no ETDump from the pip wheel
        # ("No etdump data found, try rebuilding with ... EXECUTORCH_ENABLE_EVENT_TRACER").
        raise ProfileUnavailable("the pip build of ExecuTorch's runtime has no event tracer, so no ETDump profile; "
                                 "the cell records its delegation (info.delegation) instead")


class ExecutorchBackend(Backend):
    name = "executorch"
    rank = 70
    description = "ExecuTorch with the XNNPACK delegate (.pte, ExecuTorch runtime's Python bindings)"
    packages = ("executorch",)
    install_hint = "pip install -e '.[executorch]'"
    devices = ("cpu",)
    int8_unavailable = ("not wired in dlcompare yet: ExecuTorch 1.4's XNNPACKQuantizer (PT2E, static per-channel) "
                        "is its path, to be added as the issue's follow-up")
    runtime_modules = ("executorch.exir", "executorch.backends.xnnpack.partition.xnnpack_partitioner",
                       "executorch.runtime", "executorch.devtools.backend_debug")

    def required_modules(self) -> tuple[str, ...]:
        return ("executorch.exir", "executorch.runtime")

    def available(self, device: str = "cpu") -> tuple[bool, str]:
        if device == "cuda":
            return False, "ExecuTorch targets CPUs and edge devices (XNNPACK here); it has no CUDA target"
        return super().available(device)

    def settings(self, ctx: CompileContext) -> dict[str, Any]:
        return {"partitioners": ["XnnpackPartitioner"], "lowering": "exir.to_edge_transform_and_lower",
                "runtime": "executorch.runtime (portable kernels + XNNPACK)", "xnnpack_threadpool_threads": ctx.threads}

    def compile(self, module: Any, example_inputs: Sequence[Any], ctx: CompileContext) -> CompileResult:
        folder, expected = artifacts.store_for(self, ctx)
        warm = ctx.cache == "warm"
        with artifacts.locked(folder) if warm else contextlib.nullcontext():
            hit = warm and artifacts.is_valid(folder, expected)
            if hit:
                ctx.phases.update(export=0.0, lower=0.0, serialize=0.0)
            else:
                self._build(module, example_inputs, ctx, folder)
                artifacts.write_meta(folder, [PTE, DELEGATION], expected)
            ctx.info["delegation"] = json.loads((folder / DELEGATION).read_text())
            ctx.info["pte_bytes"] = (folder / PTE).stat().st_size
            compiled = self._load(folder / PTE, ctx, ctx.info["delegation"])
        cache = CacheVerdict("hit" if hit else "miss", artifacts.evidence(folder, hit)) if warm else None
        return CompileResult(compiled, cache=cache, info=ctx.info)

    def dynamic_session(self, module, example_inputs, dynamic_dims, strategy, ctx):
        if strategy == "symbolic":
            raise BackendUnavailable("ExecuTorch's dynamic shapes (upper-bounded dims) are not wired into dlcompare; "
                                     "see the specialize strategy")
        return super().dynamic_session(module, example_inputs, dynamic_dims, strategy, ctx)

    @staticmethod
    def _build(module, example_inputs, ctx: CompileContext, folder: Path) -> None:
        import torch
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower

        with ctx.phase("export"):
            exported = torch.export.export(module, tuple(example_inputs))
        with ctx.phase("lower"):
            try:
                edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
            except Exception as exc:
                raise RuntimeError(lowering_reason(exc)) from exc
        delegation = delegation_summary(edge.exported_program().graph_module)
        with ctx.phase("serialize"):
            program = edge.to_executorch()
            tmp = folder / f".{PTE}.{os.getpid()}.tmp"
            tmp.write_bytes(program.buffer)
            os.replace(tmp, folder / PTE)  # a concurrent reader sees the old file or the new one
        (folder / DELEGATION).write_text(json.dumps(delegation, indent=2))

    @staticmethod
    def _load(pte: Path, ctx: CompileContext, delegation: dict[str, Any]) -> ExecutorchCompiled:
        from executorch.extension.pybindings import portable_lib
        from executorch.runtime import Runtime

        with ctx.phase("load"):
            # XNNPACK runs on ExecuTorch's one process-wide pthreadpool: sized to the run's threads
            # before any method runs (its default is the machine's cores).
            portable_lib._unsafe_reset_threadpool(ctx.threads)
            program = Runtime.get().load_program(pte)
            method = program.load_method("forward")
        ctx.info["xnnpack_threadpool_threads_observed"] = portable_lib._threadpool_get_thread_count()
        if method is None:
            raise RuntimeError(f"{pte.name} has no forward method")
        return ExecutorchCompiled(method, program, delegation)


UNPACKING_OPS = frozenset({"getitem"})


def delegation_summary(graph_module) -> dict[str, Any]:
    """What ExecuTorch's own delegation report says of the lowered graph: the ops XNNPACK
    took, the ops left to the portable kernels (by op), and the delegated share."""
    from executorch.devtools.backend_debug import get_delegation_info

    info = get_delegation_info(graph_module)
    # getitem only unpacks a delegate's outputs: no kernel runs for it, so it is no fallback.
    rows = {op: row for op, row in info.delegation_by_operator.items() if op not in UNPACKING_OPS}
    delegated = sum(row.delegated for row in rows.values())
    portable = sum(row.non_delegated for row in rows.values())
    fallback = {op: row.non_delegated for op, row in sorted(rows.items()) if row.non_delegated}
    return {"delegated_subgraphs": info.num_delegated_subgraphs, "delegated_ops": delegated, "portable_ops": portable,
            "delegated_share": delegated / (delegated + portable) if delegated + portable else 0.0,
            "portable_fallback": fallback}


def op_kind(op: str) -> str | None:
    """"gemm" or "conv" for an edge op as the delegation report names it (aten_linear_default)."""
    name = op.removeprefix("aten_").removesuffix("_default")
    if "convolution" in name:
        return "conv"
    return "gemm" if name in ("linear", "addmm", "mm", "bmm", "baddbmm", "matmul") else None


def delegated_libraries(portable_fallback: dict[str, int], kinds: set[str]) -> dict[str, str]:
    """XNNPACK for each kind of eager's GEMMs and convolutions, unless an op of that kind fell
    back to ExecuTorch's portable kernels (then both, as some may still be delegated)."""
    fell_back = {op_kind(op) for op in portable_fallback}
    return {kind: "ExecuTorch portable kernels + XNNPACK" if kind in fell_back else "XNNPACK"
            for kind in sorted(kinds)}


def lowering_reason(exc: BaseException) -> str:
    """The lowering error's first line that says something: ExecuTorch's verifier starts its
    message with an empty line (``SpecViolationError: \\nOperator ... is not in Core ATen
    opset``), which the cell's one-line error would otherwise cut to the type alone."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".strip()
