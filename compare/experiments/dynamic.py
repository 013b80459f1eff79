"""The survey's dynamic-shape experiment: specialize vs symbolic, per backend.

One dimension of the workload takes K distinct sizes. *specialize* compiles per
new shape; *symbolic* compiles once with a symbolic dimension. Three workers per
(workload, backend):

- ``specialize`` and ``symbolic``, each alone in a process (so in-process compile
  caches cannot leak from one to the other): the process is first warmed on a
  throwaway size that is not among the K (one-time costs, the symbolic compile
  included, land there and are reported apart); then a seeded sequence of calls
  cycles through the K sizes. The first call at each size is a *transition*; its
  cost is that call's time beyond a steady call at the same size. K is stated.
- ``steady``: both strategies built in one process, then timed alternately at each
  size (the same ABBA sampling as the cell table), so the steady-state slowdown of
  symbolic over specialized has a paired-bootstrap interval.
"""
from __future__ import annotations

import dataclasses
import random
import statistics
import time
from typing import Any

from compare.results.protocol import CellMeasurement, CellSpec, DynamicSpec

STRATEGIES = ("specialize", "symbolic", "steady")


def shape_plan(
    workload, size: str, distinct: int, calls: int, seed: int, dim_name: str | None = None
) -> dict[str, Any]:
    """Which dim varies, its K values (the default size among them), a throwaway warm-up
    value outside them, and the call sequence."""
    specs = workload.input_specs(size)
    names = [n for s in specs for n in s.dynamic_dims.values()]
    if not names:
        raise ValueError(f"workload {workload.name!r} declares no dynamic dims")
    name = dim_name or names[0]
    if name not in names:
        raise ValueError(
            f"workload {workload.name!r} has no dynamic dim {name!r} (has: {', '.join(sorted(set(names)))})"
        )
    base = next(s.shape[d] for s in specs for d, n in s.dynamic_dims.items() if n == name)
    rng = random.Random(seed)
    # Sizes 0 and 1 are specialized by every symbolic-shape system (broadcasting rules),
    # so they would count as recompiles of the symbolic strategy; draw from 2 up.
    pool = [v for v in range(max(2, base // 4), 2 * base + 2) if v != base]
    drawn = rng.sample(pool, min(distinct, len(pool)))
    warmup, values = drawn[0], sorted([base] + drawn[1:distinct])
    order = values[:]
    rng.shuffle(order)
    sequence = [order[i % len(order)] for i in range(max(calls, len(order)))]
    return {"dim": name, "base": base, "values": values, "warmup_value": warmup, "sequence": sequence,
            "calls": len(sequence), "seed": seed}


def specs_at(specs, dim_name: str, value: int):
    out = []
    for s in specs:
        shape = list(s.shape)
        for d, n in s.dynamic_dims.items():
            if n == dim_name:
                shape[int(d)] = value
        out.append(dataclasses.replace(s, shape=tuple(shape)))
    return out


@dataclasses.dataclass
class DynamicSetup:
    workload: Any
    plan: dict[str, Any]
    inputs: dict[int, list]  # size -> inputs, on the cell's device
    dims: list[dict[int, str]]
    reference: Any  # eager, for the numerics at each size

    @classmethod
    def build(cls, spec: CellSpec, plan: dict[str, Any]) -> "DynamicSetup":
        from workloads import build_model, make_inputs, resolve_workloads

        seed, device = spec.seed, spec.device
        (workload,) = resolve_workloads([spec.workload], list(spec.workload_files))
        specs = workload.input_specs(spec.size)
        reference = build_model(workload, spec.size, seed).to(device)
        sizes = plan["values"] + [plan["warmup_value"]]
        inputs = {v: make_inputs(specs_at(specs, plan["dim"], v), seed, device) for v in sizes}
        dims = [{int(d): n for d, n in s.dynamic_dims.items() if n == plan["dim"]} for s in specs]
        return cls(workload, plan, inputs, dims, reference)

    def model(self, spec: CellSpec):
        from workloads import build_model

        return build_model(self.workload, spec.size, spec.seed).to(spec.device)


def open_session(backend, setup: DynamicSetup, spec: CellSpec, ctx, strategy: str):
    """A session for ``strategy``, warmed on the throwaway size; returns it and the seconds
    that took (the symbolic compile, or the first specialized compile, and one call)."""
    ctx.dynamic_max = max(setup.plan["values"] + [setup.plan["warmup_value"]])
    start = time.perf_counter()
    session = backend.dynamic_session(setup.model(spec), setup.inputs[setup.plan["warmup_value"]], setup.dims,
                                      strategy, ctx)
    session.run(setup.inputs[setup.plan["warmup_value"]])
    return session, time.perf_counter() - start


def measure_cell(spec: CellSpec) -> CellMeasurement:
    """The worker's answer to an experiment spec (``python -m compare.worker``)."""
    from compare.worker.steps import emit, prepare_worker

    assert spec.dynamic is not None
    backend, ctx, _ = prepare_worker(spec)
    return CellMeasurement(status="ok", experiment=measure(spec, spec.dynamic, ctx, backend, emit))


def measure(spec: CellSpec, dynamic: DynamicSpec, ctx, backend, emit) -> dict[str, Any]:
    """Runs in the worker: returns one experiment record."""
    setup = DynamicSetup.build(spec, dynamic.plan)
    strategy = dynamic.strategy
    emit(phase=f"{strategy}: warm-up on a throwaway size")
    if strategy == "steady":
        return _steady(spec, ctx, backend, setup, emit)
    session, warmup_s = open_session(backend, setup, spec, ctx, strategy)
    return _transitions(spec, dynamic, session, setup, warmup_s, emit)


def _transitions(spec: CellSpec, dynamic: DynamicSpec, session, setup: DynamicSetup, warmup_s: float,
                 emit) -> dict[str, Any]:
    import torch

    from compare.measure.numerics import compare_outputs

    plan = setup.plan
    first_call: dict[int, float] = {}
    steady: dict[int, list[float]] = {v: [] for v in plan["values"]}
    max_abs, ok = 0.0, True
    for value in plan["sequence"]:
        if value not in first_call:
            emit(phase=f"{dynamic.strategy}: new size {value}")
        start = time.perf_counter()
        compiled, out = session.run(setup.inputs[value])
        elapsed = time.perf_counter() - start
        if value in first_call:
            steady[value].append(elapsed)
            continue
        first_call[value] = elapsed
        with torch.no_grad():
            ref = setup.reference(*setup.inputs[value])
        check = compare_outputs(compiled.outputs_to_torch(out), [ref] if torch.is_tensor(ref) else list(ref))
        max_abs, ok = max(max_abs, check.get("max_abs") or 0.0), ok and check["ok"]
    emit(phase=f"{dynamic.strategy}: steady calls")
    _more_steady_calls(session, setup, steady, dynamic.steady_calls)
    transitions = []
    for value, seconds in first_call.items():
        steady_s = statistics.median(steady[value])
        transitions.append({"value": value, "first_call_s": seconds, "steady_s": steady_s,
                            "cost_s": seconds - steady_s})
    return {
        "workload": spec.workload, "backend": spec.backend, "strategy": dynamic.strategy, "status": "ok",
        "dim": plan["dim"], "values": plan["values"], "warmup_value": plan["warmup_value"], "calls": plan["calls"],
        "warmup_s": warmup_s,
        "transitions": transitions,
        "transition_count": len(transitions),
        "transition_cost_s": statistics.mean(t["cost_s"] for t in transitions),
        "compiles": session.compiles(),
        "steady_ms": {str(v): statistics.median(ts) * 1e3 for v, ts in steady.items()},
        "max_abs_err": max_abs, "numerics_ok": ok, "threads": spec.threads, "device": spec.device,
    }


def _more_steady_calls(session, setup: DynamicSetup, steady: dict[int, list[float]], extra: int) -> None:
    """Up to ``extra`` more calls per size, at least 3, about 2 s per size at most (untuned
    TVM takes seconds per call at the default size)."""
    for value in steady:
        deadline = time.perf_counter() + 2.0
        for i in range(extra):
            if i >= 3 and time.perf_counter() > deadline:
                break
            start = time.perf_counter()
            session.run(setup.inputs[value])
            steady[value].append(time.perf_counter() - start)


def _steady(spec: CellSpec, ctx, backend, setup: DynamicSetup, emit) -> dict[str, Any]:
    """Specialized and symbolic code in one process, timed alternately at each size."""
    from compare.measure.stats import geometric_mean, paired_bootstrap_medians
    from compare.measure.timing import Timed, TimingConfig, time_alternating

    sessions = {s: open_session(backend, setup, spec, ctx, s)[0] for s in ("specialize", "symbolic")}
    per_size_budget = max(0.5, spec.timing.budget_s / max(1, len(setup.plan["values"])))
    config = TimingConfig(budget_s=per_size_budget, min_samples=spec.timing.min_samples)
    per_value, resampled = [], []
    for value in setup.plan["values"]:
        emit(phase=f"steady: size {value}")
        timed = []
        for strategy in ("specialize", "symbolic"):
            compiled, _ = sessions[strategy].run(setup.inputs[value])  # compiles this size if needed
            timed.append(Timed(compiled.run, compiled.prepare(setup.inputs[value]), compiled.synchronize))
        spec_stats, sym_stats = time_alternating(timed, config)
        a, b = paired_bootstrap_medians(spec_stats.samples, sym_stats.samples)
        resampled.append(b / a)
        lo, hi = _percentiles(b / a)
        per_value.append({"value": value, "specialize_ms": spec_stats.median, "symbolic_ms": sym_stats.median,
                          "ratio": sym_stats.median / spec_stats.median, "ratio_ci": [lo, hi], "pairs": spec_stats.n})
    geo = [geometric_mean(v["ratio"] for v in per_value)]
    import numpy as np

    boot = np.exp(np.mean(np.log(np.vstack(resampled)), axis=0))
    lo, hi = _percentiles(boot)
    return {"workload": spec.workload, "backend": spec.backend, "strategy": "steady", "status": "ok",
            "dim": setup.plan["dim"], "values": setup.plan["values"], "per_value": per_value,
            "slowdown": geo[0] - 1, "slowdown_ci": [lo - 1, hi - 1], "threads": spec.threads,
            "device": spec.device}


def _percentiles(values) -> tuple[float, float]:
    import numpy as np

    lo, hi = np.percentile(values, [2.5, 97.5])
    return float(lo), float(hi)


def summarize_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (workload, backend): the cost per shape transition under each strategy, its
    reduction, and the steady-state slowdown of symbolic vs specialize with its interval
    (the survey: ~70 % lower transition cost, 3.2-10.8 % slower steady state)."""
    by_key: dict[tuple[str, str], dict[str, dict]] = {}
    for r in records:
        by_key.setdefault((r["workload"], r["backend"]), {})[r["strategy"]] = r
    rows = []
    for (workload, backend), found in by_key.items():
        row: dict[str, Any] = {"workload": workload, "backend": backend}
        for name in STRATEGIES:
            rec = found.get(name)
            row[f"{name}_status"] = rec["status"] if rec else "missing"
            if rec and rec["status"] == "ok" and name != "steady":
                row[f"{name}_transition_s"] = rec["transition_cost_s"]
                row[f"{name}_warmup_s"] = rec["warmup_s"]
                row[f"{name}_compiles"] = rec["compiles"]
                row["transitions"] = rec["transition_count"]
            elif rec and rec["status"] != "ok":
                row[f"{name}_error"] = rec.get("error")
        spec, sym, steady = (found.get(s) for s in STRATEGIES)
        if spec and sym and spec["status"] == sym["status"] == "ok" and spec["transition_cost_s"] > 0:
            row["transition_reduction"] = 1 - sym["transition_cost_s"] / spec["transition_cost_s"]
        if steady and steady["status"] == "ok":
            row["steady_slowdown"] = steady["slowdown"]
            row["steady_slowdown_ci"] = steady["slowdown_ci"]
        rows.append(row)
    return rows
