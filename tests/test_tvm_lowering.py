"""TVM lowering without tuning: default schedules, the negative-index workaround and its
upstream reproducer (in-process, seconds)."""
import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(
    __import__("importlib.util").util.find_spec("tvm") is None, reason="apache-tvm not installed"
)


class LastToken(torch.nn.Module):
    """GPT-2's next-token step in miniature: a matmul, then ``x[:, -1, :]``."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, x):
        return torch.tanh(self.proj(x))[:, -1, :]


def _relax(module, inputs, canonicalize: bool):
    from tvm.relax.frontend.torch import from_exported_program

    from adapters.tvm.backend import canonicalize_negative_indices

    exported = torch.export.export(module, tuple(inputs))
    if canonicalize:
        assert canonicalize_negative_indices(exported) == 1
    return from_exported_program(exported, unwrap_unit_return_tuple=True)


def _run(mod, inputs, schedules: bool = True):
    import tvm
    from tvm import relax

    from adapters.tvm.backend import _TvmBase
    from adapters.tvm.schedules import default_cpu_schedules

    target, _ = _TvmBase.host_target(1)
    with target:
        mod = relax.pipeline.zero_pipeline()(mod)
    if schedules:
        mod = default_cpu_schedules(mod, target)
    vm = relax.VirtualMachine(tvm.compile(mod, target=target), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(t.numpy()) for t in inputs]).numpy()


@pytest.fixture(scope="module")
def last_token():
    torch.manual_seed(0)
    module, inputs = LastToken().eval(), [torch.randn(2, 5, 16)]
    with torch.no_grad():
        return module, inputs, module(*inputs).numpy()


def test_negative_index_workaround_gives_the_right_values(last_token):
    module, inputs, expected = last_token
    np.testing.assert_allclose(_run(_relax(module, inputs, canonicalize=True), inputs), expected, rtol=1e-5, atol=1e-5)


def test_upstream_negative_index_bug_is_still_there(last_token):
    """When this fails, TVM's frontend handles ``x[:, -1]``: drop the workaround."""
    module, inputs, expected = last_token
    got = _run(_relax(module, inputs, canonicalize=False), inputs)
    assert not np.allclose(got, expected, rtol=1e-5, atol=1e-5), "TVM now lowers negative select correctly"


def test_default_schedules_leave_no_function_unscheduled(last_token):
    import tvm
    from tvm import relax

    from adapters.tvm.backend import _TvmBase
    from adapters.tvm.schedules import default_cpu_schedules, unscheduled

    module, inputs, expected = last_token
    target, _ = _TvmBase.host_target(2)
    with target:
        naked = relax.pipeline.zero_pipeline()(_relax(module, inputs, canonicalize=True))
    before = unscheduled(naked)
    scheduled = default_cpu_schedules(naked, target)
    assert before and unscheduled(scheduled) == []
    assert unscheduled(naked) == before  # the input module is left as it was
    parallel = [f for _, f in scheduled.functions_items() if isinstance(f, tvm.tirx.PrimFunc) and "parallel" in str(f)]
    assert parallel, "the fallback runs spatial loops in parallel"
    np.testing.assert_allclose(_run(_relax(module, inputs, canonicalize=True), inputs), expected, rtol=1e-5, atol=1e-5)


def test_default_schedules_off_keeps_the_naked_build_and_says_so(last_token):
    from types import SimpleNamespace

    from tvm import relax

    from adapters.tvm.backend import TvmOptions, _TvmBase
    from adapters.tvm.schedules import unscheduled

    module, inputs, _ = last_token
    target, _ = _TvmBase.host_target(2)
    with target:
        naked = relax.pipeline.zero_pipeline()(_relax(module, inputs, canonicalize=True))
    for option, left in (("off", unscheduled(naked)), ("dlight", []), ("on", [])):
        ctx = SimpleNamespace(options=TvmOptions(tvm_default_schedules=option), info={})
        built = _TvmBase.cpu_default_schedules(naked, target, ctx)
        assert ctx.info["unscheduled_functions"] == left == unscheduled(built)
        assert ctx.info["default_scheduled"] == sorted(set(unscheduled(naked)) - set(left))


class Embedding(torch.nn.Module):
    """One token's embedding row: the gather that GPT-2's decode step starts with."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(16, 8)

    def forward(self, ids):
        return self.table(ids)


def _prepacked_gather(keep_gathers: bool):
    """The embedding built as a tuned CPU build would be: layout-free marks, the take's loops
    fused, parallel and vectorized, MetaSchedule's RewriteLayout, then the prepacking passes."""
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from adapters.tvm.backend import _TvmBase, keep_gathers_in_layout, prepack_weights
    from adapters.tvm.schedules import default_cpu_schedules

    torch.manual_seed(0)
    module, ids = Embedding().eval(), torch.tensor([[3]])
    target, _ = _TvmBase.host_target(1)
    with target:
        mod = tvm.transform.Sequential([relax.pipeline.zero_pipeline(), relax.transform.AttachAttrLayoutFreeBuffers()])(
            _relax(module, [ids], canonicalize=False))
    skipped = keep_gathers_in_layout(mod) if keep_gathers else []
    (gvar,) = [g for g, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc) and "T_take" in str(f)]
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": mod[gvar]}))
    outer, inner = sch.split(sch.fuse(*sch.get_loops(sch.get_sblock("T_take"))), [None, 8])
    sch.parallel(outer)
    sch.vectorize(inner)
    assert ms.postproc.RewriteLayout().apply(sch)
    mod[gvar] = sch.mod["main"].with_attr("tirx.is_scheduled", True)
    with target:
        mod = prepack_weights()(mod)
    vm = relax.VirtualMachine(tvm.compile(default_cpu_schedules(mod, target), target=target), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(ids.numpy())).numpy()
    with torch.no_grad():
        return got, module(ids).numpy(), module.table.weight[-1].numpy(), skipped


def test_upstream_gather_layout_rewrite_bug_is_still_there():
    """When this fails, RewriteLayout handles a gather's table: keep_gathers_in_layout can go."""
    got, expected, last_row, _ = _prepacked_gather(keep_gathers=False)
    assert not np.allclose(got, expected), "TVM's RewriteLayout now keeps a gathered row"
    np.testing.assert_array_equal(got[0, 0], last_row)  # the failure as found: every id reads the last row


def test_gathers_keep_their_layout_and_read_the_right_row():
    got, expected, _, skipped = _prepacked_gather(keep_gathers=True)
    assert len(skipped) == 1 and skipped[0].startswith("take")
    np.testing.assert_allclose(got, expected, rtol=0, atol=0)


def test_tuning_prepares_the_decode_step_with_gathers_unpacked_and_gemms_prepacked(tmp_path):
    import tvm

    from adapters.base import CompileContext
    from adapters.tvm.backend import OPAQUE_PATTERN, TvmBackend, TvmOptions
    from workloads.nets.llm import DecoderLM

    torch.manual_seed(0)
    lm = DecoderLM(32, 16, 2, 1, 8).eval()
    with torch.no_grad():
        logits, keys, values = lm.prefill_module()(torch.randint(0, 32, (1, 4)))
    examples = [logits.argmax(-1, keepdim=True), torch.tensor([4]), keys, values]
    ctx = CompileContext("gpt2_decode", "k", "cpu", 1, tmp_path, options=TvmOptions())
    backend = TvmBackend()
    target, _, _ = backend.tuning_target(ctx)
    mod, _ = backend.prepare_for_tuning(backend.import_relax(lm.decode_module().eval(), examples, ctx), target, ctx)
    marked = {g.name_hint: (int(f.attrs["op_pattern"]) if "op_pattern" in f.attrs else None)
              for g, f in mod.functions_items()
              if isinstance(f, tvm.tirx.PrimFunc) and len(f.attrs.get("layout_free_buffers", []))}
    assert OPAQUE_PATTERN not in marked.values()
    assert any("matmul" in name for name in marked), "weight prepacking stays on for the GEMMs"
    assert ctx.info["layout_rewrite_skipped"] and all(n.startswith("take") for n in ctx.info["layout_rewrite_skipped"])


@pytest.mark.parametrize("c,f,k,stride,padding,groups", [
    (1, 16, 10, 5, 0, 1),  # wav2vec2's first feature-encoder conv: one input channel, kernel 10, stride 5
    (8, 16, 3, 2, 1, 1),  # Whisper's second stem conv: padded and strided
    (16, 16, 5, 1, 2, 4),  # grouped (wav2vec2's positional conv is grouped)
])
def test_conv1d_becomes_a_conv2d_of_height_one_that_cpu_conv_schedules(c, f, k, stride, padding, groups):
    import tvm
    from tvm import relax

    from adapters.tvm.backend import conv1d_as_conv2d

    torch.manual_seed(0)
    # a GroupNorm after it, as in wav2vec2's feature encoder: it must stay channels-first
    module = torch.nn.Sequential(torch.nn.Conv1d(c, f, k, stride=stride, padding=padding, groups=groups),
                                 torch.nn.GroupNorm(f, f), torch.nn.GELU()).eval()
    inputs = [torch.randn(1, c, 40)]
    mod = _relax(module, inputs, canonicalize=False)
    rewritten = conv1d_as_conv2d()(mod)
    assert "R.nn.conv1d" not in rewritten.script() and 'data_layout="NHWC"' in rewritten.script()
    with torch.no_grad():
        expected = module(*inputs).numpy()
    np.testing.assert_allclose(_run(rewritten, inputs), expected, rtol=1e-5, atol=1e-5)
    # and the whole untuned CPU build (NHWC layout, CpuConv) still agrees
    from types import SimpleNamespace

    from adapters.tvm.backend import TvmOptions, _TvmBase, conv_layout_passes

    ctx = SimpleNamespace(options=TvmOptions(tvm_default_schedules="on"), info={})
    target, _ = _TvmBase.host_target(2)
    with target:
        laid_out = tvm.transform.Sequential(conv_layout_passes(ctx))(mod)
        assert "channel_axis=1" in laid_out.script(), "the GroupNorm stays channels-first"
        built = relax.pipeline.zero_pipeline()(laid_out)
    built = _TvmBase.cpu_default_schedules(built, target, ctx)
    convs = [f.script() for g, f in built.functions_items() if "conv2d" in g.name_hint]
    assert convs and all('"local"' in text and "T.vectorized" in text for text in convs), "CpuConv's register tile"
    vm = relax.VirtualMachine(tvm.compile(built, target=target), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(inputs[0].numpy())).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
