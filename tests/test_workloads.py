import pytest
import torch

from workloads import (
    TensorSpec,
    Workload,
    WorkloadError,
    build_model,
    builtin_workloads,
    load_workload_file,
    make_inputs,
    resolve_workloads,
)

pytestmark = pytest.mark.unit

PAPER = ["elementwise_chain", "norm_residual", "conv", "mlp", "attention"]


def test_the_five_paper_workloads_are_built_in():
    assert list(builtin_workloads("paper")) == PAPER
    assert [w.name for w in resolve_workloads(None)] == PAPER  # the default suite stays the paper's


@pytest.mark.parametrize("name", PAPER)
def test_small_workload_runs_and_is_deterministic(name):
    w = builtin_workloads()[name]
    specs = w.input_specs("small")
    a = build_model(w, "small", seed=0)
    b = build_model(w, "small", seed=0)
    x1 = make_inputs(specs, seed=0)
    x2 = make_inputs(specs, seed=0)
    for t1, t2 in zip(x1, x2):
        assert torch.equal(t1, t2)
    with torch.no_grad():
        out_a, out_b = a(*x1), b(*x2)
    assert torch.equal(out_a, out_b)
    assert torch.isfinite(out_a).all()
    assert not a.training
    # another seed gives other inputs
    assert not torch.equal(make_inputs(specs, seed=1)[0], x1[0])


@pytest.mark.parametrize("name", PAPER)
def test_every_size_declares_shapes_and_dynamic_dims(name):
    w = builtin_workloads()[name]
    for size in ("small", "default", "large"):
        specs = w.input_specs(size)
        assert specs and all(0 in s.dynamic_dims for s in specs)
    assert w.key("small") != w.key("default")
    assert w.key("small") == w.key("small")


def _workload(**kw):
    base = dict(name="w", description="d", sizes={"small": {}}, build=lambda p: torch.nn.Identity(),
                inputs=lambda p: [TensorSpec((2, 2))])
    base.update(kw)
    return Workload(**base)


@pytest.mark.parametrize("shape,message", [
    ((0, 4), "zero or negative"),
    ((-1, 4), "zero or negative"),
    ((2**20, 2**20), "elements"),
    ((2.5, 4), "tuple of ints"),
])
def test_absurd_shapes_are_refused_with_the_field_named(shape, message):
    w = _workload(inputs=lambda p: [TensorSpec(shape)])
    with pytest.raises(WorkloadError, match=message):
        w.input_specs("small")


def test_unknown_size_and_bad_dtype():
    with pytest.raises(WorkloadError, match="no size 'large'"):
        _workload().input_specs("large")
    with pytest.raises(WorkloadError, match="dtype"):
        _workload(inputs=lambda p: [TensorSpec((2,), dtype="float8")]).input_specs("small")


def test_user_workload_file(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(
        "import torch\n"
        "from workloads import Workload, TensorSpec\n"
        "square = Workload('square', 'x*x', {'small': {'n': 3}},\n"
        "                  lambda p: torch.nn.Identity(), lambda p: [TensorSpec((p['n'], p['n']))])\n"
    )
    (w,) = load_workload_file(path)
    assert w.name == "square" and w.source == str(path)
    names = [w.name for w in resolve_workloads(None, [path])]
    assert "square" in names and "mlp" in names


@pytest.mark.parametrize("text,message", [
    ("def broken(:\n", "syntax error at line 1"),
    ("raise ValueError('boom')\n", "ValueError at line 1: boom"),
    ("x = 1\n", "defines no Workload"),
    ("WORKLOADS = 3\n", "WORKLOADS must be a list"),
    ("WORKLOADS = ['nope']\n", "holds a str"),
])
def test_broken_workload_files_give_one_line_errors(tmp_path, text, message):
    path = tmp_path / "bad.py"
    path.write_text(text)
    with pytest.raises(WorkloadError, match=message) as info:
        load_workload_file(path)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_file_and_unknown_name(tmp_path):
    with pytest.raises(WorkloadError, match="no such file"):
        load_workload_file(tmp_path / "nope.py")
    with pytest.raises(WorkloadError, match="unknown workload 'nope'"):
        resolve_workloads(["nope"])
