"""``python -m compare bisect RUN_DIR --cell WORKLOAD/BACKEND``: which op broke the numerics.

The parent (``compare.bisect.run``) reads the run, plans the cell exactly as the run did and starts one
worker (``python -m compare.experiments.bisect SPEC``) that does the work, so that a
backend that crashes costs the bisect alone. The worker:

1. exports the cell's model with ``torch.export`` and records every node's value in
   float64 and in eager at the cell's precision (``torch.fx.Interpreter``);
2. compiles growing **prefixes** of that graph through the backend, each returning every
   value still live at its end, and judges each value as the cell's numerics do, per op:
   *bad* when its error against float64 exceeds ``FACTOR`` times eager's own error at
   that op plus one ulp of its scale (or is non-finite, or the prefix fails to compile).
   A binary search finds the shortest bad prefix: its last op is the first whose error
   jumps beyond eager's;
3. compiles that op **alone**, on eager's own inputs to it, and writes ``repro.py`` (with
   ``repro_inputs.pt``): the op, its inputs and the check, which exits 1 while the
   backend still gets the op wrong.

Prefixes rather than one graph that returns every intermediate: a backend fuses within a
prefix as it would within the model, so a bug that needs fusion still shows.
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from compare.results.protocol import BisectSpec

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout, for the reproducer's sys.path
FACTOR = 10.0  # an op is bad when its error vs float64 exceeds this many times eager's


@dataclass(frozen=True)
class Judgement:
    """One value of a probe: its error against float64 beside eager's, and the verdict."""
    node: str
    error: float
    eager_error: float
    limit: float
    bad: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Probe:
    """One compile of a prefix ending at candidate ``index``."""
    index: int
    node: str
    bad: bool
    failure: str | None = None  # the prefix did not compile or run
    worst: Judgement | None = None


@dataclass
class Finding:
    cell: str
    backend: str
    ops: int  # candidate ops in the exported graph
    probes: list[Probe] = field(default_factory=list)
    node: str | None = None  # the first bad op
    op: str | None = None  # its target and arguments, as FX prints them
    isolated: Judgement | None = None  # the op compiled alone
    isolated_failure: str | None = None
    reproducer: str | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def judge(name: str, got: Any, ref64: Any, eager: Any, eps: float, factor: float = FACTOR) -> Judgement:
    """The bisect's rule for one value (tensors): non-finite where float64 is finite, or an
    error beyond ``factor`` x eager's own + one ulp (``eps``) of the value's scale."""
    import torch

    got64, r64, e64 = (torch.as_tensor(t).detach().cpu().to(torch.float64) for t in (got, ref64, eager))
    if tuple(got64.shape) != tuple(r64.shape):
        return Judgement(name, math.inf, 0.0, 0.0, True)
    finite = torch.isfinite(r64)
    error = _max_abs(got64, r64, finite)
    eager_error = _max_abs(e64, r64, finite)
    scale = float(r64[finite].abs().max()) if bool(finite.any()) else 0.0
    limit = factor * eager_error + eps * scale
    return Judgement(name, error, eager_error, limit, not error <= limit)


def _max_abs(a, ref, finite) -> float:
    import torch

    if not a.numel():
        return 0.0
    diff = torch.where(finite & torch.isfinite(a), (a - ref).abs(), torch.full_like(a, math.inf))
    return float(diff[finite].max()) if bool(finite.any()) else 0.0


def first_bad(count: int, is_bad: Callable[[int], bool]) -> int | None:
    """The smallest index in [0, count) with ``is_bad``, assuming once bad, bad after
    (an error, once made, flows on); None when the last is not bad."""
    if count == 0 or not is_bad(count - 1):
        return None
    lo, hi = 0, count - 1  # hi is bad
    while lo < hi:
        mid = (lo + hi) // 2
        if is_bad(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


# ----------------------------------------------------------------------------- worker side

class Graph:
    """The exported model, every node's float64 and eager value, and its candidate ops."""

    def __init__(self, model, inputs):
        import copy

        import torch

        self.gm = torch.export.export(model, tuple(inputs)).module()
        self.inputs = list(inputs)
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        self.input_of = {n: t for n, t in zip(placeholders, self.inputs)}
        self.eager = self._values(self.gm, self.inputs)
        inputs64 = [t.double() if t.is_floating_point() else t for t in self.inputs]
        self.ref64 = self._values(copy.deepcopy(self.gm).double(), inputs64)
        self.candidates = [n for n in self.gm.graph.nodes
                           if n.op == "call_function" and isinstance(self.eager.get(n.name), torch.Tensor)]

    @staticmethod
    def _values(gm, inputs) -> dict[str, Any]:
        import torch
        import torch.fx

        values: dict[str, Any] = {}

        class Recorder(torch.fx.Interpreter):
            def run_node(self, n):
                values[n.name] = result = super().run_node(n)
                return result

        with torch.no_grad():
            Recorder(gm).run(*inputs)
        return values

    def prefix(self, index: int):
        """The graph up to candidate ``index``, returning every value live after it; with
        the placeholders it uses and the inputs that feed them."""
        import torch.fx

        end = self.candidates[index]
        order = list(self.gm.graph.nodes)
        kept = order[:order.index(end) + 1]
        inside = set(kept)
        live = [n for n in self.candidates[:index + 1]
                if n is end or any(u not in inside for u in n.users)]
        graph, env = torch.fx.Graph(), {}
        used = [n for n in kept if n.op == "placeholder" and n.users and any(u in inside for u in n.users)]
        for node in kept:
            if node.op == "placeholder" and node not in used:
                continue
            env[node] = graph.node_copy(node, lambda n: env[n])
        graph.output(tuple(env[n] for n in live))
        return torch.fx.GraphModule(self.gm, graph), [self.input_of[n] for n in used], live


def compile_and_run(backend, module, inputs, ctx) -> list:
    import torch

    ctx.phases.clear()
    with torch.no_grad():
        compiled = backend.compile(module, inputs, ctx).compiled
        raw = compiled.run(compiled.prepare(inputs))
        compiled.synchronize()
        return list(compiled.outputs_to_torch(raw))


def probe(graph: Graph, index: int, backend, ctx, eps: float, factor: float) -> Probe:
    from compare.worker.steps import one_line

    module, inputs, live = graph.prefix(index)
    node = graph.candidates[index].name
    try:
        outputs = compile_and_run(backend, module, inputs, ctx)
    except Exception as exc:  # a prefix that does not compile is a finding too
        return Probe(index, node, True, failure=one_line(exc, 300, keep_end=True))
    if len(outputs) != len(live):
        return Probe(index, node, True, failure=f"{len(outputs)} outputs for {len(live)} live values")
    verdicts = [judge(n.name, out, graph.ref64[n.name], graph.eager[n.name], eps, factor) for n, out in zip(live, outputs)]
    worst = max(verdicts, key=lambda j: (j.bad, j.error / j.limit if j.limit else j.error))
    return Probe(index, node, worst.bad, worst=worst)


def op_text(node) -> str:
    """``aten.gelu.default(linear_2, approximate='tanh')``: the op as a person reads it."""
    args = [a.name if hasattr(a, "name") else repr(a) for a in node.args]
    args += [f"{k}={getattr(v, 'name', None) or repr(v)}" for k, v in node.kwargs.items()]
    return f"{node.target}({', '.join(args)})"


def isolate(graph: Graph, node, backend, ctx, eps: float, factor: float):
    """The op alone, on eager's own values of its inputs: (module, inputs, judgement or failure)."""
    import torch
    import torch.fx

    from compare.worker.steps import one_line

    sub, env, inputs = torch.fx.Graph(), {}, []
    for arg in node.all_input_nodes:
        env[arg] = sub.placeholder(f"a{len(inputs)}")
        value = graph.eager.get(arg.name)
        inputs.append(value if value is not None else graph.input_of[arg])
    sub.output((sub.node_copy(node, lambda n: env[n]),))
    module = torch.fx.GraphModule(torch.nn.Module(), sub)
    ref64 = module(*[t.double() if t.is_floating_point() else t for t in inputs])[0]
    eager = module(*inputs)[0]
    try:
        (out,) = compile_and_run(backend, module, inputs, ctx)
    except Exception as exc:
        return module, inputs, None, one_line(exc, 300, keep_end=True)
    return module, inputs, judge(node.name, out, ref64, eager, eps, factor), None


REPRO = '''"""Reproducer written by `compare bisect` for {cell}/{backend}: {op}

The first op of the model whose error against float64 jumps beyond eager's own
({factor:g}x eager's error plus one ulp of the value's scale), compiled alone on the
values eager gave its inputs (repro_inputs.pt). Exits 1 while {backend} gets it wrong.
Run from the dlcompare checkout: python {path}
"""
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, {root!r})
from adapters import CompileContext, get_backend  # noqa: E402
from compare.experiments.bisect import compile_and_run, judge  # noqa: E402

OPTIONS = {options!r}


class Op(torch.nn.Module):
{forward}

def main() -> int:
    torch.set_num_threads({threads})
    inputs = torch.load(Path(__file__).with_name("repro_inputs.pt"))
    backend = get_backend({backend!r})
    ctx = CompileContext("repro", "repro-{node}", {device!r}, {threads}, Path(tempfile.mkdtemp()),
                         options=backend.typed_options(OPTIONS))
    (got,) = compile_and_run(backend, Op().eval(), inputs, ctx)
    with torch.no_grad():
        ref64 = Op()(*[t.double() if t.is_floating_point() else t for t in inputs])[0]
        eager = Op()(*inputs)[0]
    verdict = judge({node!r}, got, ref64, eager, eps={eps!r}, factor={factor!r})
    print(f"{backend}: error vs float64 {{verdict.error:.3g}}, eager's {{verdict.eager_error:.3g}}, "
          f"limit {{verdict.limit:.3g}}: {{'WRONG' if verdict.bad else 'ok'}}")
    return 1 if verdict.bad else 0


if __name__ == "__main__":
    sys.exit(main())
'''


def write_reproducer(out: Path, module, inputs, spec: BisectSpec, node: str, op: str, eps: float,
                     factor: float) -> Path:
    import torch

    torch.save([t.detach().clone() for t in inputs], out / "repro_inputs.pt")
    forward = "\n".join("    " + line for line in module.code.strip().splitlines())
    path = out / "repro.py"
    cell = spec.cell
    path.write_text(REPRO.format(cell=spec.label, backend=cell.backend, op=op, factor=factor,
                                 path=path, root=str(PROJECT_ROOT), options=cell.options,
                                 forward=forward, threads=cell.threads, node=node, device=cell.device,
                                 eps=eps))
    return path


def bisect(spec: BisectSpec) -> Finding:
    import torch

    from compare.measure.numerics import PRECISIONS
    from compare.worker.steps import CellSetup, prepare_worker

    backend, ctx, _ = prepare_worker(spec.cell)
    ctx.on_phase = None  # no protocol events: this worker talks to a person
    setup = CellSetup.build(spec.cell)
    eps, factor = PRECISIONS[setup.dtype_name].eps, float(spec.factor or FACTOR)
    with torch.no_grad():
        graph = Graph(setup.model.eval(), setup.inputs)
    finding = Finding(spec.label, spec.cell.backend, len(graph.candidates))
    seen: dict[int, Probe] = {}

    def is_bad(index: int) -> bool:
        if index not in seen:
            print(f"bisect: prefix of {index + 1} of {len(graph.candidates)} ops", file=sys.stderr, flush=True)
            seen[index] = probe(graph, index, backend, ctx, eps, factor)
        return seen[index].bad

    index = first_bad(len(graph.candidates), is_bad)
    finding.probes = [seen[i] for i in sorted(seen)]
    if index is None:
        finding.note = (f"the whole graph's outputs are within {factor:g}x eager's own error of float64: "
                        "no op to blame (the cell's failure, if any, is within the bisect's rule)")
        return finding
    node = graph.candidates[index]
    finding.node, finding.op = node.name, op_text(node)
    module, inputs, verdict, failure = isolate(graph, node, backend, ctx, eps, factor)
    finding.isolated, finding.isolated_failure = verdict, failure
    if verdict is not None and not verdict.bad:
        finding.note = "the op is wrong only inside its prefix (fusion with its neighbours); no one-op reproducer"
    else:
        finding.reproducer = str(write_reproducer(Path(spec.out_dir), module, inputs, spec, node.name,
                                                  finding.op, eps, factor))
    return finding


def main(argv: list[str] | None = None) -> int:
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)  # torch.export's pytree deprecations, per deepcopy
    spec = BisectSpec.from_json(Path((argv or sys.argv[1:])[0]).read_text())
    finding = bisect(spec)
    (Path(spec.out_dir) / "bisect.json").write_text(json.dumps(finding.to_dict(), indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
