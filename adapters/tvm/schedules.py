"""Default CPU schedules for TVM, so that no kernel runs as a naked loop nest.

TVM 0.27's CPU pipeline gives a PrimFunc no schedule at all: without a tuning record
it runs single-threaded and scalar. ``default_cpu_schedules`` applies, to every
PrimFunc not yet scheduled (``tirx.is_scheduled``), first ``CpuConv`` and ``CpuMatmul``, then TVM's own
``dlight.cpu`` rules (GEMV, Reduction), then ``CpuFallback``, a minimal
parallel-and-vectorize rule for everything else. ``unscheduled`` lists what is left
without any schedule.

``CpuMatmul`` exists because TVM 0.27 has no CPU matmul rule (dlight's ``Matmul`` is
GPU-only; topi's x86 dense schedules are gone): the fallback ran ``matmul`` /
``NT_matmul`` with the reduction innermost and no tiling, 50-100x slower than a tiled
kernel on BERT-base shapes (issue #44). It takes a block ``C[S, I, J] += A[S, I, K] *
B[S, J, K]`` (any operand layout, batched or not, plain iterator indices: not a
convolution) and gives it an 8-row x 2-vector register tile, a local accumulator, a
packed ``K x tile`` strip of B per parallel task (columns padded to whole tiles when
no tile divides them, e.g. ViT's 197 tokens), the fused epilogue (bias, activation) in
the tile's write-back; anything it refuses goes on to the next rule. ``CpuConv`` gives an
NHWC/HWIO 2-D convolution (the backend converts the graph's convolutions to that layout)
the same tile, read as a GEMM over output columns x output channels; 1-D convolutions
still get the fallback.
"""
from __future__ import annotations

from typing import Any

SCHEDULED_ATTR = "tirx.is_scheduled"


def _rule(name: str, schedule):
    """A dlight CPU rule that gives a PrimFunc ``schedule(func, vector_bits)``, or None (the
    next rule then applies) when the schedule refuses it or TVM refuses a primitive. Built
    lazily: it subclasses TVM types, and importing this module must not import TVM."""
    from tvm import tirx
    from tvm.s_tir.dlight.cpu.base import CPUScheduleRule
    from tvm.target.codegen import llvm_get_vector_width

    class Rule(CPUScheduleRule):
        def apply(self, func, target, _tunable):
            if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
                return None
            try:
                return schedule(func, llvm_get_vector_width(target))
            except Exception:  # noqa: BLE001 - tvm raises its own error types
                return None

    Rule.__name__ = Rule.__qualname__ = name
    return Rule()


def _fallback_rule():
    """``CpuFallback``: inline what can be inlined; then, per remaining block, run the
    spatial loops in parallel and vectorize the innermost spatial loop when its extent is
    a multiple of the vector width (fp32 lanes), placed below any reduction loop."""
    return _rule("CpuFallback", _schedule_fallback)


def _schedule_fallback(func, vector_bits: int):
    # Some blocks refuse a primitive (e.g. a reduction whose init was split off): then try
    # once more without vectorizing (the rule leaves the function unscheduled if that fails).
    try:
        return _schedule(func, max(1, vector_bits // 32))
    except Exception:  # noqa: BLE001 - tvm raises its own error types
        return _schedule(func, 1)


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


def _matmul_rule():
    """``CpuMatmul``: a register-tiled GEMM for ``C[S, I, J] += A[S, I, K] * B[S, J, K]``
    blocks (``matmul``, ``NT_matmul``, batched, with fused producers and epilogues): see
    ``_schedule_matmul``. Anything else is left to the next rule."""
    return _rule("CpuMatmul", _schedule_matmul)


MATMUL_TILE_ROWS = 8  # rows of the register tile (unrolled)
MATMUL_TILE_VECTORS = 2  # vectors of the register tile's columns: 8 x 2 zmm accumulators on AVX-512


def _pure_accesses(block) -> bool:
    """Every buffer index is a block iterator or a constant (plain (batch) matmuls, not a
    convolution's ``y + ry`` windows, whose implicit GEMM this rule does not attempt)."""
    from tvm import tirx

    for region in (*block.reads, *block.writes):
        for r in region.region:
            if not (isinstance(r.extent, tirx.IntImm) and r.extent.value == 1):
                return False
            if not isinstance(r.min, (tirx.Var, tirx.IntImm)):
                return False
    return True


def _schedule_matmul(func, vector_bits: int, tile_rows: int = MATMUL_TILE_ROWS,
                     tile_vectors: int = MATMUL_TILE_VECTORS):
    """Schedule the one GEMM block of ``func``, or return None when it has none.

    Loop nest: ``parallel(S, J / tj)`` - pack the ``K x tj`` strip of B contiguously -
    ``I / ti`` - zero a ``ti x tj`` local accumulator - ``k`` - ``ti`` (unrolled) - ``tj``
    (vectorized) - then write the tile back through the fused epilogue (bias, activation),
    vectorized. The strip is reused by every row tile; the accumulator stays in registers.
    """
    from tvm import DataType, s_tir, tirx
    from tvm.s_tir.dlight.analysis import get_root_block
    from tvm.s_tir.dlight.gpu.matmul import IterKind, detect_iter_traits, get_index_map, get_reduction_blocks

    sch = s_tir.Schedule(func)
    blocks = sch.get_child_blocks(get_root_block(sch))
    mains = get_reduction_blocks(sch, blocks)
    if not mains:
        return None
    main = mains[0]
    # Spatial producers (a transpose, a cast, a broadcast) go into the GEMM block.
    _inline_producers(sch, main)
    stmt = sch.get(main)
    if not _pure_accesses(stmt):
        return None
    traits, maps = detect_iter_traits(stmt), get_index_map(stmt)
    if traits is None or maps is None:
        return None
    c_traits = traits[2]
    # The vectorized axis is the output's innermost one: J (an axis of reads[1]) or I (of reads[0]).
    if not c_traits or c_traits[-1].kind not in (IterKind.kIter_I, IterKind.kIter_J):
        return None
    vec_is_j = c_traits[-1].kind == IterKind.kIter_J
    out_dtype = stmt.writes[0].source.dtype
    if not str(out_dtype).startswith(("float", "bfloat")):
        return None
    lanes = max(1, vector_bits // DataType(out_dtype).bits)
    sch.transform_block_layout(main, maps[0])  # loops: S, I, J, K (each fused; extent 1 if absent)
    s, i, j, k = sch.get_loops(main)
    if not vec_is_j:
        i, j = j, i
    b_idx = 1 if vec_is_j else 0  # the operand that the vector axis indexes
    j_extent = sch.get(j).extent
    if not isinstance(j_extent, tirx.IntImm):
        return None
    tile_cols = next((t for t in (lanes * tile_vectors, lanes, lanes // 2, lanes // 4)
                      if t >= 4 and j_extent.value % t == 0), None)
    padded = tile_cols is None
    if padded:  # (ViT's 197 tokens) pad J to whole tiles: B's packed strip and the accumulator
        tile_cols = lanes * tile_vectors if j_extent.value >= 4 * lanes * tile_vectors else lanes
        sch.pad_einsum(main, [1, 1, tile_cols, 1] if vec_is_j else [1, tile_cols, 1, 1])
        s, i, j, k = sch.get_loops(main)
        if not vec_is_j:
            i, j = j, i
    i_extent = sch.get(i).extent
    rows = tile_rows if not isinstance(i_extent, tirx.IntImm) else max(1, min(tile_rows, i_extent.value))
    # Local accumulator, and the epilogue (bias add, activation) fused into its write-back.
    writeback = sch.cache_write(main, 0, "local")
    # pad_einsum's consumer copies the valid part of the padded tile out: the epilogue goes into
    # that copy (reverse-inlining the copy itself would drop its bound and write past the output)
    unpad = sch.get_consumers(writeback)[0] if padded else None
    _inline_consumers(sch, unpad if padded else writeback)
    io, ii = sch.split(i, factors=[None, rows])
    jo, ji = sch.split(j, factors=[None, tile_cols])
    sch.reorder(s, jo, io, k, ii, ji)
    outer = sch.fuse(s, jo)
    sch.reverse_compute_at(writeback, io, preserve_unit_loops=True)
    if padded:
        sch.reverse_compute_at(unpad, io, preserve_unit_loops=True)
    # the padded copy of B (pad_einsum's producer) is the packed strip when there is one
    packed = _producer_of(sch, main, b_idx) if padded else sch.cache_read(main, b_idx, "global")
    sch.compute_at(packed, outer, preserve_unit_loops=True)
    _pack_layout(sch, main, b_idx)
    _vectorize_innermost(sch, packed, lanes)
    return _finish_tile(sch, main, writeback, outer, ii, ji, k, lanes)


def _finish_tile(sch, main, writeback, outer, rows, cols, reduction, lanes: int):
    """The register tile's last steps, shared by the GEMM and convolution rules: the outer
    loop in parallel, the tile's rows unrolled and columns vectorized, the accumulator
    zeroed above ``reduction`` and written back in vectors, and every block left at the
    root parallelized too."""
    sch.parallel(outer)
    sch.unroll(rows)
    sch.vectorize(cols)
    init = sch.decompose_reduction(main, reduction)
    _vectorize_innermost(sch, init, lanes)
    _vectorize_innermost(sch, writeback, lanes)
    _schedule_rest(sch, lanes)
    return sch


def _conv_rule():
    """``CpuConv``: a register-tiled direct convolution for NHWC ``conv2d`` blocks with HWIO
    weights (``--tvm-default-schedules on`` converts the graph's convolutions to that layout):
    see ``_schedule_conv``. Anything else is left to the next rule."""
    return _rule("CpuConv", _schedule_conv)


CONV_ROW_TILES = (8, 7, 6, 5, 4, 3, 2, 1)  # output columns per register tile: the first that divides the width


def _schedule_conv(func, vector_bits: int, tile_vectors: int = MATMUL_TILE_VECTORS):
    """Schedule the one NHWC convolution block of ``func`` (``conv2d_nhwc`` or
    ``group_conv2d_nhwc``, loops ``n, y, x, f, ry, rx, rc``), or return None.

    As the matmul rule, for a convolution read as a GEMM: ``parallel(n, y, F / tf)`` - ``X /
    tx`` - zero a ``tx x tf`` local accumulator - ``ry, rx, rc`` - ``tx`` (unrolled) - ``tf``
    (vectorized over output channels, which HWIO weights and NHWC inputs hold contiguously;
    a depthwise convolution's input channel follows its output channel) - the fused epilogue
    in the write-back. The padded input stays its own (parallel) loop nest."""
    from tvm import DataType, s_tir, tirx
    from tvm.s_tir.dlight.analysis import get_root_block
    from tvm.s_tir.dlight.gpu.matmul import get_reduction_blocks

    sch = s_tir.Schedule(func)
    mains = get_reduction_blocks(sch, sch.get_child_blocks(get_root_block(sch)))
    if not mains or len(mains) != 1:
        return None
    main = mains[0]
    stmt = sch.get(main)
    if not stmt.name_hint.startswith(("conv2d_nhwc", "group_conv2d_nhwc")):
        return None
    kinds = "".join({tirx.IterVar.DataPar: "S", tirx.IterVar.CommReduce: "R"}.get(iv.iter_type, "O")
                    for iv in stmt.iter_vars)
    out_dtype = stmt.writes[0].source.dtype
    loops = sch.get_loops(main)
    if kinds != "SSSSRRR" or len(loops) != 7 or not str(out_dtype).startswith(("float", "bfloat")):
        return None
    n, y, x, f, ry, rx, rc = loops
    f_extent, x_extent = sch.get(f).extent, sch.get(x).extent
    if not isinstance(f_extent, tirx.IntImm) or not isinstance(x_extent, tirx.IntImm):
        return None
    lanes = max(1, vector_bits // DataType(out_dtype).bits)
    tile_cols = next((t for t in (lanes * tile_vectors, lanes, lanes // 2) if t >= 4 and f_extent.value % t == 0), None)
    if tile_cols is None:
        return None
    rows = next(r for r in CONV_ROW_TILES if x_extent.value % r == 0)
    writeback = sch.cache_write(main, 0, "local")
    _inline_consumers(sch, writeback)
    xo, xi = sch.split(x, factors=[None, rows])
    fo, fi = sch.split(f, factors=[None, tile_cols])
    sch.reorder(n, y, fo, xo, ry, rx, rc, xi, fi)
    outer = sch.fuse(n, y, fo)
    sch.reverse_compute_at(writeback, xo, preserve_unit_loops=True)
    return _finish_tile(sch, main, writeback, outer, xi, fi, ry, lanes)


def _schedule_rest(sch, lanes: int) -> None:
    """Parallelize and vectorize, as the fallback does, any block still at the root (a producer
    or epilogue that would not inline): left alone it would run serial and scalar."""
    from tvm import tirx
    from tvm.s_tir.dlight.analysis import get_root_block

    for block in sch.get_child_blocks(get_root_block(sch)):
        loops = sch.get_loops(block)
        if not loops or sch.get(loops[0]).kind == tirx.ForKind.PARALLEL:
            continue
        kinds = "".join({tirx.IterVar.DataPar: "S", tirx.IterVar.CommReduce: "R"}.get(iv.iter_type, "O")
                        for iv in sch.get(block).iter_vars)
        try:
            _parallel_vectorize(sch, block, kinds, lanes)
        except Exception:  # noqa: BLE001 - a refused primitive leaves the block as it is
            continue


def _producer_of(sch, block, read_index: int):
    buffer = sch.get(block).reads[read_index].source
    for producer in sch.get_producers(block):
        if any(w.source.same_as(buffer) for w in sch.get(producer).writes):
            return producer
    raise ValueError("no producer block for the padded operand")


def _inline_producers(sch, block) -> None:
    for producer in sch.get_producers(block):
        try:
            sch.compute_inline(producer)
        except Exception:  # noqa: BLE001 - not inlinable: left as its own loop nest
            continue


def _inline_consumers(sch, block) -> None:
    """Reverse-inline the chain of elementwise consumers into ``block``: only a sole consumer
    (TVM 0.27 inlines one of two readers and leaves the other reading a buffer nobody writes:
    GELU's ``x * erf(x)``, issue #44's CI failure) that covers ``block``'s whole domain (a slice
    would be written over that domain, out of bounds)."""
    progress = True
    while progress:
        progress = False
        consumers = sch.get_consumers(block)
        for consumer in consumers if len(consumers) == 1 else ():
            if not _same_domain(sch, block, consumer):
                continue
            try:
                sch.reverse_compute_inline(consumer)
                progress = True
            except Exception:  # noqa: BLE001 - e.g. a reduction: the fallback schedules it
                continue


def _same_domain(sch, a, b) -> bool:
    from tvm.sym.analyzer import Analyzer

    def size(block):
        total = 1
        for iv in sch.get(block).iter_vars:
            total = total * iv.dom.extent
        return total

    return bool(Analyzer().can_prove_equal(size(a), size(b)))


def _pack_layout(sch, main, b_idx: int) -> None:
    """Lay the packed strip out as ``[.., k, j]`` when B is stored ``[.., j, k]`` (NT_matmul)."""
    from tvm import tirx

    stmt = sch.get(main)
    indices = [r.min for r in stmt.reads[b_idx].region]
    iters = {iv.var: iv for iv in stmt.iter_vars}
    kinds = [None if not isinstance(x, tirx.Var) or x not in iters else iters[x].iter_type for x in indices]
    positions = {kind: n for n, kind in enumerate(kinds) if kind is not None}
    spatial, reduce = positions.get(tirx.IterVar.DataPar), positions.get(tirx.IterVar.CommReduce)
    if spatial is None or reduce is None or spatial > reduce:
        return
    # swap the spatial (j) and reduction (k) indices of B's layout
    order = list(range(len(indices)))
    order[spatial], order[reduce] = order[reduce], order[spatial]
    sch.transform_layout(main, ("read", b_idx), lambda *idx: [idx[n] for n in order])


def _vectorize_innermost(sch, block, lanes: int) -> None:
    """Vectorize the innermost loop of ``block`` by ``lanes`` (split off when longer), or
    by half that when it divides; else leave it."""
    from tvm import tirx

    loops = sch.get_loops(block)
    extent = sch.get(loops[-1]).extent if loops else None
    if not isinstance(extent, tirx.IntImm) or extent.value < 2:
        return
    for width in (lanes, lanes // 2):
        if width > 1 and extent.value % width == 0:
            inner = loops[-1] if extent.value == width else sch.split(loops[-1], factors=[None, width])[1]
            sch.vectorize(inner)
            return


def default_cpu_schedules(mod: Any, target: Any, matmul: bool = True) -> Any:
    """The convolution and matmul rules (``matmul``), dlight's CPU rules, then the fallback,
    on every PrimFunc without a schedule."""
    from tvm.s_tir import dlight as dl

    # ApplyDefaultSchedule edits the module it is given: schedule a copy.
    mod = type(mod)(dict(mod.functions_items()), attrs=mod.attrs, global_infos=mod.global_infos)
    with target:
        rules = [_conv_rule(), _matmul_rule()] if matmul else []
        return dl.ApplyDefaultSchedule(*rules, dl.cpu.GEMV(), dl.cpu.Reduction(), _fallback_rule())(mod)


def unscheduled(mod: Any) -> list[str]:
    """Names of the PrimFuncs that carry no schedule (no tuning record, no default rule)."""
    from tvm import tirx

    return sorted(gv.name_hint for gv, func in mod.functions_items()
                  if isinstance(func, tirx.PrimFunc) and not (func.attrs and func.attrs.get(SCHEDULED_ATTR)))
