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
    for option, left in (("off", unscheduled(naked)), ("on", [])):
        ctx = SimpleNamespace(options=TvmOptions(tvm_default_schedules=option), info={})
        built = _TvmBase.cpu_default_schedules(naked, target, ctx)
        assert ctx.info["unscheduled_functions"] == left == unscheduled(built)
        assert ctx.info["default_scheduled"] == sorted(set(unscheduled(naked)) - set(left))
