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

int8 (``--dtype int8``): ExecuTorch's XNNPACK quantization flow, in a ``quantize`` phase
before ``export``: ``XNNPACKQuantizer`` with ``get_symmetric_quantization_config(
is_per_channel=True)`` (static, int8 symmetric per-channel weights, int8 activations),
``prepare_pt2e`` on the exported module, the calibration batches, ``convert_pt2e``; the
converted module is exported and lowered as above, XNNPACK taking the quantized patterns.
The stored .pte is keyed on the quantizer's settings and the calibration data's hash.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from . import artifacts, executorch_llm
from .base import Backend, BackendOptions, BackendUnavailable, CacheVerdict, CompileContext, Compiled, CompileResult, option
from .profiling import KernelProfile, ProfileUnavailable

PTE = "model.pte"
DELEGATION = "delegation.json"  # stored beside the .pte: a hit reports the same delegation as the build
INT8_OPS = "int8_ops.json"  # int8 cells: the int8/fp32 op counts of the lowered graph, likewise

# What an int8 cell records as its quantizer (settings.quantizer), as ExecuTorch's XNNPACK
# quantization guide configures it.
XNNPACK_QUANTIZER = {"quantizer": "executorch XNNPACKQuantizer (PT2E, torchao.quantization.pt2e)",
                     "config": "get_symmetric_quantization_config(is_per_channel=True): static, int8 symmetric "
                               "weights per output channel, int8 activations per tensor (asymmetric)",
                     "per_channel": True, "symmetric_weights": True, "static": True,
                     "calibration": "prepare_pt2e -> calibration batches -> convert_pt2e"}


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


@dataclass(frozen=True)
class ExecutorchOptions(BackendOptions):
    executorch_llm_path: str = option("export-llm", "decode suite: ExecuTorch's own LLM export for Llama and Qwen2 "
                                      "('export-llm': llama_transformer with its custom SDPA and KV-cache ops, one "
                                      "program, as export_llm makes it; adapters/executorch_llm.py) or the generic "
                                      "lowering of the prefill and decode modules ('generic', for an A/B)",
                                      flag="executorch-llm-path", choices=("export-llm", "generic"))


class ExecutorchBackend(Backend):
    name = "executorch"
    unsupported_op_patterns = (
        re.compile(r"Operator (?:torch\._ops\.)?([\w.]+) is not in Core ATen opset"),  # its verifier
        re.compile(r"Missing out variants?: \{'?([\w.:]+)"),
    )
    rank = 70
    description = "ExecuTorch with the XNNPACK delegate (.pte, ExecuTorch runtime's Python bindings)"
    reproducer = """\
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.runtime import Runtime
program = to_edge_transform_and_lower(torch.export.export(model, tuple(inputs)),
                                      partitioner=[XnnpackPartitioner()]).to_executorch()
method = Runtime.get().load_program(program.buffer).load_method("forward")
print(method.execute(inputs))
"""
    packages = ("executorch",)
    install_hint = "pip install -e '.[executorch]'"
    options_type = ExecutorchOptions
    devices = ("cpu",)
    quantizes = True  # int8: XNNPACKQuantizer (PT2E), then lowered to XNNPACK's quantized kernels
    quantizer_modules = ("torchao",)  # the XNNPACKQuantizer derives from torchao's pt2e Quantizer
    runtime_modules = ("executorch.exir", "executorch.backends.xnnpack.partition.xnnpack_partitioner",
                       "executorch.runtime", "executorch.devtools.backend_debug")

    def required_modules(self) -> tuple[str, ...]:
        return ("executorch.exir", "executorch.runtime")

    def available(self, device: str = "cpu") -> tuple[bool, str]:
        if device == "cuda":
            return False, "ExecuTorch targets CPUs and edge devices (XNNPACK here); it has no CUDA target"
        return super().available(device)

    def weight_only_recipe(self, bits: int) -> dict[str, Any] | None:
        from .weight_only import executorch_recipe

        return executorch_recipe(bits)

    def quantize_weights(self, module: Any, bits: int) -> Any:
        from .weight_only import executorch_8da

        return executorch_8da(module, bits)

    def settings(self, ctx: CompileContext) -> dict[str, Any]:
        return {"partitioners": ["XnnpackPartitioner"], "lowering": "exir.to_edge_transform_and_lower",
                "runtime": "executorch.runtime (portable kernels + XNNPACK)", "xnnpack_threadpool_threads": ctx.threads,
                "llm_path": ctx.options.executorch_llm_path,
                **({"quantizer": quantizer_settings(ctx.calibration)} if ctx.calibration is not None else {})}

    def compile(self, module: Any, example_inputs: Sequence[Any], ctx: CompileContext) -> CompileResult:
        if executorch_llm.applies(module, example_inputs, ctx):
            return executorch_llm.compile_part(module, example_inputs, ctx, delegation_summary)
        folder, expected = artifacts.store_for(self, ctx)
        expected.update(quantization_key(ctx.calibration))
        quantized = ctx.calibration is not None
        files = [PTE, DELEGATION, INT8_OPS] if quantized else [PTE, DELEGATION]
        warm = ctx.cache == "warm"
        with artifacts.locked(folder) if warm else contextlib.nullcontext():
            hit = warm and artifacts.is_valid(folder, expected)
            if hit:
                ctx.phases.update(dict.fromkeys((["quantize"] if quantized else []) + ["export", "lower", "serialize"], 0.0))
            else:
                self._build(module, example_inputs, ctx, folder)
                artifacts.write_meta(folder, files, expected)
            ctx.info["delegation"] = json.loads((folder / DELEGATION).read_text())
            if quantized:
                ctx.info["int8_ops"] = json.loads((folder / INT8_OPS).read_text())
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

        if ctx.calibration is not None:
            module = xnnpack_quantize(module, example_inputs, ctx)
        with ctx.phase("export"):
            exported = torch.export.export(module, tuple(example_inputs))
        with ctx.phase("lower"):
            try:
                edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
            except Exception as exc:
                raise RuntimeError(lowering_reason(exc)) from exc
        lowered = edge.exported_program().graph_module
        delegation = delegation_summary(lowered)
        if ctx.calibration is not None:
            (folder / INT8_OPS).write_text(json.dumps(lowered_op_counts(lowered), indent=2))
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


def quantizer_settings(calibration: list | None) -> dict[str, Any]:
    """``XNNPACK_QUANTIZER`` with the calibration batch count and the versions that quantized."""
    import importlib.metadata

    return {**XNNPACK_QUANTIZER, "calibration_batches": len(calibration or []),
            "executorch": importlib.metadata.version("executorch"), "torchao": importlib.metadata.version("torchao")}


def quantization_key(calibration: list | None) -> dict[str, Any]:
    """What a stored .pte must also have been built with: for int8 the quantizer's settings
    and the calibration data (by hash), so no program calibrated on other data is served;
    else no quantizer, which an int8 program's metadata fails and an fp32 program's, stored
    before int8 existed (without the field), still passes."""
    if calibration is None:
        return {"quantizer": None}
    return {"dtype": "int8", "quantizer": quantizer_settings(calibration), "calibration_sha256":
            artifacts.tensors_sha256(calibration)}


def xnnpack_quantize(module: Any, example_inputs: Sequence[Any], ctx: CompileContext) -> Any:
    """The module quantized by ExecuTorch's XNNPACKQuantizer on the cell's calibration
    batches, in a ``quantize`` phase; a module the quantizer cannot take fails in one line."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    from . import pt2e

    quantizer = XNNPACKQuantizer()
    quantizer.set_global(get_symmetric_quantization_config(is_per_channel=True))
    with ctx.phase("quantize"):
        try:
            return pt2e.quantize(module, example_inputs, ctx.calibration or [], quantizer)
        except Exception as exc:
            raise RuntimeError(f"XNNPACKQuantizer: {lowering_reason(exc)}") from exc


def lowered_op_counts(graph_module) -> dict[str, int]:
    """int8 and fp32 compute ops of the lowered program, from the graphs XNNPACK took (its
    delegates' own graphs) and the ops left outside them. Inside a delegate, an op runs as
    one of XNNPACK's int8 kernels when XNNPACK's partitioner has a static-quant kernel for it
    and a dequantize (or such an int8 op, as a fused ReLU) feeds it; any other op (GELU on a
    dequantized tensor) runs fp32. Outside, ExecuTorch's portable kernels dequantize and run
    every op in fp32 (``quantized_outside_delegates`` counts those fed by a dequantize).
    Quantize and dequantize nodes count as conversions, layout ops not at all."""
    from .pt2e import node_kind, op_name

    counts = {"int8": 0, "fp32": 0, "conversions": 0, "quantized_outside_delegates": 0}
    int8_ops = xnnpack_int8_ops()
    for node in graph_module.graph.nodes:
        if node.op == "get_attr" and node.name.startswith("lowered_module_"):
            count_delegated(getattr(graph_module, node.name).original_module.graph, int8_ops, counts)
        elif (kind := node_kind(node)) is not None and op_name(node.target) != "executorch_call_delegate":
            counts["fp32" if kind == "int8" else kind] += 1
            counts["quantized_outside_delegates"] += kind == "int8"
    return counts


def count_delegated(graph, int8_ops: frozenset[str], counts: dict[str, int]) -> None:
    """``lowered_op_counts`` for one delegate's graph (nodes in topological order)."""
    from .pt2e import flat_args, is_dequantize, node_kind, op_name

    int8_nodes: set[Any] = set()
    for node in graph.nodes:
        kind = node_kind(node)
        if kind in (None, "conversions"):
            counts["conversions"] += kind == "conversions"
            continue
        quantized_input = any(is_dequantize(arg) or arg in int8_nodes for arg in flat_args(node.args))
        if quantized_input and op_name(node.target) in int8_ops:
            int8_nodes.add(node)
            counts["int8"] += 1
        else:
            counts["fp32"] += 1


def xnnpack_int8_ops() -> frozenset[str]:
    """The ops XNNPACK's partitioner lowers statically quantized (its configs that support
    STATIC_QUANT: linear, convolution, add, mul, cat, relu, max_pool2d...), by base name."""
    from executorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS
    from executorch.backends.xnnpack.partition.config.xnnpack_config import ConfigPrecisionType

    names = set()
    for config_type in ALL_PARTITIONER_CONFIGS:
        config = config_type()
        if ConfigPrecisionType.STATIC_QUANT in config.supported_precision_types():
            name = config.target_name.split(".")[0]
            names.add(name.removesuffix("_copy") if name != "_to_copy" else name)
    return frozenset(names)


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
