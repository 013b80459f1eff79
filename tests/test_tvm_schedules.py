"""TVM's default CPU schedules: the register-tiled matmul rule (``CpuMatmul`` in
adapters/tvm/schedules.py) on GEMM PrimFuncs as Relax legalizes them, and the other
rules' share (in-process, seconds: small shapes)."""
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(
    __import__("importlib.util").util.find_spec("tvm") is None, reason="apache-tvm not installed"
)


def _target():
    from adapters.tvm.backend import _TvmBase

    return _TvmBase.host_target(1)[0]


def _gemm(layout: str, batch: int | None, m: int, n: int, k: int, epilogue: bool = False):
    """A te GEMM PrimFunc: ``NN`` (B is K x N, Relax's ``matmul`` of a folded weight), ``NT``
    (B is N x K, ``NT_matmul``) or ``BA`` (NN with B read first), optionally batched and with
    a bias + ReLU epilogue."""
    from tvm import te, tirx

    lead = (batch,) if batch else ()
    a = te.placeholder((*lead, m, k), name="A")
    b = te.placeholder((*lead, n, k) if layout == "NT" else (*lead, k, n), name="B")
    r = te.reduce_axis((0, k), name="k")

    def b_at(bi, j, kk):
        idx = (j, kk) if layout == "NT" else (kk, j)
        return b[(*bi, *idx)]

    if layout == "BA":  # B read first: the output's inner axis comes from the block's first operand
        c = te.compute((*lead, m, n), lambda *ix: te.sum(b_at(ix[:-2], ix[-1], r) * a[(*ix[:-1], r)], axis=r),
                       name="matmul")
    else:
        c = te.compute((*lead, m, n), lambda *ix: te.sum(a[(*ix[:-1], r)] * b_at(ix[:-2], ix[-1], r), axis=r),
                       name="matmul")
    args = [a, b]
    if epilogue:
        bias = te.placeholder((n,), name="bias")
        c = te.compute(c.shape, lambda *ix: tirx.max(c[ix] + bias[ix[-1]], tirx.const(0.0, "float32")), name="T_relu")
        args.append(bias)
    return te.create_prim_func([*args, c]).with_attr("global_symbol", "main")


def _reference(layout, inputs, epilogue):
    a, b = inputs[0], inputs[1]
    out = a @ (np.swapaxes(b, -1, -2) if layout == "NT" else b)
    return np.maximum(out + inputs[2], 0) if epilogue else out


def _run(func, inputs, out_shape):
    import tvm

    lib = tvm.compile(tvm.IRModule({"main": func}), target=_target())
    out = tvm.runtime.tensor(np.zeros(out_shape, "float32"))
    lib["main"](*[tvm.runtime.tensor(x) for x in inputs], out)
    return out.numpy()


@pytest.mark.parametrize("layout,batch,m,n,k,epilogue", [
    ("NN", None, 32, 64, 48, False),
    ("NT", None, 32, 64, 48, False),
    ("NN", 3, 16, 32, 24, False),
    ("NT", 2, 8, 48, 40, False),
    ("NN", None, 13, 48, 20, True),  # rows not a multiple of the tile; bias + ReLU fused into the write-back
    ("NT", None, 13, 50, 24, True),  # columns padded to whole tiles (pad_einsum), epilogue in the copy-out
    ("NN", 3, 9, 197, 16, False),  # ViT's 197 tokens
    ("BA", None, 16, 40, 24, True),
])
def test_matmul_rule_schedules_gemms_and_keeps_their_values(layout, batch, m, n, k, epilogue):
    from adapters.tvm.schedules import SCHEDULED_ATTR, _matmul_rule, default_cpu_schedules

    func = _gemm(layout, batch, m, n, k, epilogue)
    target = _target()
    with target:
        sch = _matmul_rule().apply(func, target, False)
    assert sch is not None, "the matmul rule refused a GEMM"
    text = sch.mod["main"].script()
    assert "T.parallel" in text and "T.vectorized" in text and "T.unroll" in text
    assert '"local"' in text  # the accumulator tile
    if epilogue:
        assert 'T.sblock("T_relu")' not in text  # fused into the accumulator's write-back

    import tvm

    mod = default_cpu_schedules(tvm.IRModule({"main": func}), target)
    scheduled = mod["main"]
    assert scheduled.attrs and scheduled.attrs.get(SCHEDULED_ATTR)
    rng = np.random.default_rng(0)
    lead = (batch,) if batch else ()
    inputs = [rng.standard_normal((*lead, m, k)).astype("float32"),
              rng.standard_normal((*lead, n, k) if layout == "NT" else (*lead, k, n)).astype("float32")]
    if epilogue:
        inputs.append(rng.standard_normal(n).astype("float32"))
    expected = _reference(layout, inputs, epilogue)
    got = _run(scheduled, inputs, expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))


def test_matmul_rule_builds_an_epilogue_that_reads_the_gemm_twice():
    """GELU's ``y * f(y)`` after a bias add: ``y`` has two readers, and reverse-inlining one of
    them left the other reading a buffer nothing writes (a build error on the survey's mlp)."""
    import tvm
    from tvm import te, tirx

    from adapters.tvm.schedules import default_cpu_schedules

    m, n, k = 4, 64, 32
    a, b, bias = te.placeholder((m, k), name="A"), te.placeholder((k, n), name="B"), te.placeholder((n,), name="bias")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="matmul")
    y = te.compute((m, n), lambda i, j: c[i, j] + bias[j], name="T_add")
    t = te.compute((m, n), lambda i, j: tirx.tanh(y[i, j] * tirx.const(0.5, "float32")), name="T_tanh")
    out = te.compute((m, n), lambda i, j: y[i, j] * t[i, j], name="T_multiply")
    func = te.create_prim_func([a, b, bias, out]).with_attr("global_symbol", "main")
    mod = default_cpu_schedules(tvm.IRModule({"main": func}), _target())
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype("float32") for s in ((m, k), (k, n), (n,))]
    pre = inputs[0] @ inputs[1] + inputs[2]
    got = _run(mod["main"], inputs, (m, n))
    np.testing.assert_allclose(got, pre * np.tanh(pre * 0.5), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("hw,c,f,k,stride,groups", [
    (14, 16, 64, 3, 1, 1),  # 3x3, bias + ReLU fused into the write-back
    (14, 32, 32, 3, 2, 1),  # strided
    (14, 32, 32, 3, 1, 32),  # depthwise: the input channel follows the output channel
    (7, 24, 40, 1, 1, 1),  # 7 columns, 40 channels: a 7-row tile, half-vector columns
])
def test_conv_rule_schedules_nhwc_convolutions_and_keeps_their_values(hw, c, f, k, stride, groups):
    import tvm
    from tvm import te, tirx, topi

    from adapters.tvm.schedules import _conv_rule, default_cpu_schedules

    a, w, bias = te.placeholder((1, hw, hw, c), name="A"), te.placeholder((k, k, c // groups, f), name="W"), \
        te.placeholder((f,), name="bias")
    conv = topi.nn.conv(a, w, stride, k // 2, 1, groups, "NHWC", "HWIO")
    out = te.compute(conv.shape, lambda *i: tirx.max(conv[i] + bias[i[-1]], tirx.const(0.0, "float32")), name="T_relu")
    func = te.create_prim_func([a, w, bias, out]).with_attr("global_symbol", "main")
    target = _target()
    with target:
        sch = _conv_rule().apply(func, target, False)
    assert sch is not None, "the conv rule refused an NHWC convolution"
    text = sch.mod["main"].script()
    assert "T.parallel" in text and "T.vectorized" in text and '"local"' in text and 'T.sblock("T_relu")' not in text
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal([int(d) for d in t.shape]).astype("float32") for t in (a, w, bias)]
    got = _run(default_cpu_schedules(tvm.IRModule({"main": func}), target)["main"], inputs, [int(d) for d in out.shape])
    import torch

    ref = torch.nn.functional.conv2d(torch.from_numpy(inputs[0]).permute(0, 3, 1, 2),
                                     torch.from_numpy(inputs[1]).permute(3, 2, 0, 1), stride=stride, padding=k // 2,
                                     groups=groups)
    ref = torch.relu(ref + torch.from_numpy(inputs[2])[None, :, None, None]).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def _softmax():
    from tvm import te, topi

    x = te.placeholder((4, 32), name="x")
    return te.create_prim_func([x, topi.nn.softmax(x)]).with_attr("global_symbol", "main")


def _conv():
    from tvm import te

    data = te.placeholder((1, 8, 10, 10), name="data")
    weight = te.placeholder((16, 8, 3, 3), name="weight")
    rc, ry, rx = te.reduce_axis((0, 8), "rc"), te.reduce_axis((0, 3), "ry"), te.reduce_axis((0, 3), "rx")
    out = te.compute((1, 16, 8, 8), lambda n, f, y, x: te.sum(
        data[n, rc, y + ry, x + rx] * weight[f, rc, ry, rx], axis=[rc, ry, rx]), name="conv")
    return te.create_prim_func([data, weight, out]).with_attr("global_symbol", "main")


@pytest.mark.parametrize("make", [_softmax, _conv], ids=["softmax", "conv"])
def test_matmul_rule_leaves_other_kernels_to_the_other_rules(make):
    import tvm

    from adapters.tvm.schedules import SCHEDULED_ATTR, _matmul_rule, default_cpu_schedules

    func = make()
    target = _target()
    with target:
        assert _matmul_rule().apply(func, target, False) is None
    scheduled = default_cpu_schedules(tvm.IRModule({"main": func}), target)["main"]
    assert scheduled.attrs and scheduled.attrs.get(SCHEDULED_ATTR)  # dlight's rules or the fallback took it


def test_matmul_rule_takes_a_symbolic_row_count():
    """A Relax function with a dynamic sequence length: the row tile gets a predicate."""
    import tvm
    from tvm import te, tirx

    from adapters.tvm.schedules import _matmul_rule, default_cpu_schedules

    m = tirx.Var("m", "int64")
    a, b = te.placeholder((1, m, 64), name="A"), te.placeholder((64, 96), name="B")
    r = te.reduce_axis((0, 64), "k")
    c = te.compute((1, m, 96), lambda x, i, j: te.sum(a[x, i, r] * b[r, j], axis=r), name="matmul")
    d = te.compute((1, m, 96), lambda x, i, j: tirx.tanh(c[x, i, j]), name="T_tanh")
    func = te.create_prim_func([a, b, d]).with_attr("global_symbol", "main")
    target = _target()
    with target:
        assert _matmul_rule().apply(func, target, False) is not None
    lib = tvm.compile(default_cpu_schedules(tvm.IRModule({"main": func}), target), target=target)
    rng = np.random.default_rng(0)
    for rows in (5, 37):
        x, w = rng.standard_normal((1, rows, 64)).astype("float32"), rng.standard_normal((64, 96)).astype("float32")
        out = tvm.runtime.tensor(np.zeros((1, rows, 96), "float32"))
        lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
        np.testing.assert_allclose(out.numpy(), np.tanh(x @ w), rtol=1e-4, atol=1e-4)
