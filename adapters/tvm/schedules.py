"""Default CPU schedules for TVM, so that no kernel runs as a naked loop nest.

TVM 0.27's CPU pipeline gives a PrimFunc no schedule at all: without a tuning record
it runs single-threaded and scalar. ``default_cpu_schedules`` applies, to every
PrimFunc not yet scheduled (``tirx.is_scheduled``), TVM's own ``dlight.cpu`` rules
(GEMV, Reduction) and then ``CpuFallback``, a minimal parallel-and-vectorize rule
for everything else. ``unscheduled`` lists what is left without any schedule.
"""
from __future__ import annotations

from typing import Any

SCHEDULED_ATTR = "tirx.is_scheduled"


def _fallback_rule():
    """The rule class, built lazily: it subclasses TVM types, and importing this module
    must not import TVM."""
    from tvm import tirx
    from tvm.s_tir.dlight.cpu.base import CPUScheduleRule
    from tvm.target.codegen import llvm_get_vector_width

    class CpuFallback(CPUScheduleRule):
        """Inline what can be inlined; then, per remaining block, run the spatial loops
        in parallel and vectorize the innermost spatial loop when its extent is a
        multiple of the vector width (fp32 lanes), placed below any reduction loop."""

        def apply(self, func, target, _tunable):
            if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
                return None
            lanes = max(1, llvm_get_vector_width(target) // 32)
            # Some blocks refuse a primitive (e.g. a reduction whose init was split off):
            # then try once more without vectorizing, then leave the function unscheduled.
            for vector in (lanes, 1):
                try:
                    return _schedule(func, vector)
                except Exception:  # noqa: BLE001 - tvm raises its own error types
                    continue
            return None

    return CpuFallback()


def _schedule(func, lanes: int):
    from tvm import s_tir
    from tvm.s_tir.dlight.analysis import normalize_prim_func
    from tvm.s_tir.dlight.base import try_inline

    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    if infos is None:
        raise ValueError("not a normalizable PrimFunc")
    for info in try_inline(sch, infos):
        _parallel_vectorize(sch, info.block_rv, info.dom_kind(), lanes)
    return sch

def _parallel_vectorize(sch, block, kinds: str, lanes: int) -> None:
    from tvm import tirx

    loops = sch.get_loops(block)
    if not loops or "O" in kinds or len(kinds) != len(loops) or kinds[0] != "S":
        return
    spatial = [loop for loop, kind in zip(loops, kinds) if kind == "S"]
    reduce = [loop for loop, kind in zip(loops, kinds) if kind == "R"]
    inner = None
    extent = sch.get(spatial[-1]).extent
    if isinstance(extent, tirx.IntImm) and extent.value % lanes == 0 and extent.value >= lanes and lanes > 1:
        outer, inner = sch.split(spatial[-1], factors=[None, lanes])
        spatial = spatial[:-1] + [outer]
    sch.reorder(*spatial, *reduce, *([inner] if inner is not None else []))
    sch.parallel(sch.fuse(*spatial))
    if reduce:
        sch.decompose_reduction(block, reduce[0])
    if inner is not None:
        sch.vectorize(inner)


def default_cpu_schedules(mod: Any, target: Any) -> Any:
    """dlight's CPU rules, then the fallback, on every PrimFunc without a schedule."""
    from tvm.s_tir import dlight as dl

    # ApplyDefaultSchedule edits the module it is given: schedule a copy.
    mod = type(mod)(dict(mod.functions_items()), attrs=mod.attrs, global_infos=mod.global_infos)
    with target:
        return dl.ApplyDefaultSchedule(dl.cpu.GEMV(), dl.cpu.Reduction(), _fallback_rule())(mod)


def unscheduled(mod: Any) -> list[str]:
    """Names of the PrimFuncs that carry no schedule (no tuning record, no default rule)."""
    from tvm import tirx

    return sorted(gv.name_hint for gv, func in mod.functions_items()
                  if isinstance(func, tirx.PrimFunc) and not (func.attrs and func.attrs.get(SCHEDULED_ATTR)))
