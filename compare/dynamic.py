"""The survey's dynamic-shape experiment: specialize vs symbolic, per backend.

A seeded sequence of N calls cycles through K distinct sizes of one dimension.
*specialize* compiles per new shape; *symbolic* compiles once for all. The
worker measures every call; a call at a shape not seen before is a transition
(compile + first call), the rest are steady state. Each strategy runs in its
own worker, so in-process compile caches cannot leak from one to the other.
"""
from __future__ import annotations

import dataclasses
import random
import statistics
import time
from typing import Any

STRATEGIES = ("specialize", "symbolic")


def shape_plan(workload, size: str, distinct: int, calls: int, seed: int, dim_name: str | None = None) -> dict[str, Any]:
    """Which dim varies, its K values (the default size among them) and the call sequence."""
    specs = workload.input_specs(size)
    names = [n for s in specs for n in s.dynamic_dims.values()]
    if not names:
        raise ValueError(f"workload {workload.name!r} declares no dynamic dims")
    name = dim_name or names[0]
    if name not in names:
        raise ValueError(f"workload {workload.name!r} has no dynamic dim {name!r} (has: {', '.join(sorted(set(names)))})")
    base = next(s.shape[d] for s in specs for d, n in s.dynamic_dims.items() if n == name)
    rng = random.Random(seed)
    # Sizes 0 and 1 are specialized by every symbolic-shape system (broadcasting rules),
    # so they would count as recompiles of the symbolic strategy; draw from 2 up.
    pool = [v for v in range(max(2, base // 4), 2 * base + 1) if v != base]
    values = sorted([base] + rng.sample(pool, min(distinct - 1, len(pool))))
    order = values[:]
    rng.shuffle(order)
    sequence = [order[i % len(order)] for i in range(max(calls, len(order)))]
    return {"dim": name, "base": base, "values": values, "sequence": sequence, "calls": len(sequence), "seed": seed}


def specs_at(specs, dim_name: str, value: int):
    out = []
    for s in specs:
        shape = list(s.shape)
        for d, n in s.dynamic_dims.items():
            if n == dim_name:
                shape[int(d)] = value
        out.append(dataclasses.replace(s, shape=tuple(shape)))
    return out


def measure(spec: dict[str, Any], ctx, backend, emit) -> dict[str, Any]:
    """Runs in the worker: returns one experiment record."""
    import torch

    from workloads import build_model, make_inputs, resolve_workloads

    from .measure import compare_outputs

    plan = spec["dynamic"]
    strategy = spec["strategy"]
    (workload,) = resolve_workloads([spec["workload"]], spec.get("workload_files", []))
    specs = workload.input_specs(spec["size"])
    model = build_model(workload, spec["size"], spec.get("seed", 0))
    reference = build_model(workload, spec["size"], spec.get("seed", 0))
    inputs = {v: make_inputs(specs_at(specs, plan["dim"], v), spec.get("seed", 0)) for v in plan["values"]}
    dims = [{int(d): n for d, n in s.dynamic_dims.items() if n == plan["dim"]} for s in specs]
    first = plan["sequence"][0]

    emit(phase=f"{strategy}: setup")
    start_all = time.perf_counter()
    t0 = time.perf_counter()
    ctx.options["dynamic_max"] = max(plan["values"])  # the bound exporters get for the symbolic dim
    session = backend.dynamic_session(model, inputs[first], dims, strategy, ctx)
    setup_s = time.perf_counter() - t0  # symbolic compiles here; specialize on first call

    seen: set[int] = set()
    transitions = []
    steady: dict[int, list[float]] = {v: [] for v in plan["values"]}
    max_abs = 0.0
    ok = True
    for i, value in enumerate(plan["sequence"]):
        if value not in seen:
            emit(phase=f"{strategy}: new shape {value}")
        t0 = time.perf_counter()
        compiled, out = session.run(inputs[value])
        elapsed = time.perf_counter() - t0
        if value not in seen:
            seen.add(value)
            transitions.append({"call": i, "value": value, "seconds": elapsed + (setup_s if i == 0 else 0.0)})
            with torch.no_grad():
                ref = reference(*inputs[value])
            check = compare_outputs(compiled.outputs_to_torch(out), [ref] if torch.is_tensor(ref) else list(ref))
            max_abs = max(max_abs, check.get("max_abs") or 0.0)
            ok = ok and check["ok"]
        else:
            steady[value].append(elapsed)
    emit(phase=f"{strategy}: steady state")
    # Steady state: up to `steady_calls` more calls per size, at least 3, about 2 s per
    # size at most (untuned TVM takes seconds per call at the default size).
    extra = int(spec.get("steady_calls", 15))
    for value in plan["values"]:
        deadline = time.perf_counter() + 2.0
        for i in range(extra):
            if i >= 3 and time.perf_counter() > deadline:
                break
            t0 = time.perf_counter()
            session.run(inputs[value])
            steady[value].append(time.perf_counter() - t0)
    return {
        "workload": spec["workload"],
        "backend": spec["backend"],
        "strategy": strategy,
        "status": "ok",
        "dim": plan["dim"],
        "values": plan["values"],
        "calls": plan["calls"],
        "transition_s": sum(t["seconds"] for t in transitions),
        "transitions": transitions,
        "compiles": session.compiles(),
        "steady_ms": {str(v): statistics.median(ts) * 1e3 for v, ts in steady.items() if ts},
        "sequence_s": time.perf_counter() - start_all,
        "max_abs_err": max_abs,
        "numerics_ok": ok,
        "threads": spec["threads"],
    }


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (workload, backend): transition-cost reduction and steady-state slowdown of
    symbolic vs specialize (the survey: ~70 % lower cost, 3.2-10.8 % slower)."""
    by_key: dict[tuple[str, str], dict[str, dict]] = {}
    for r in records:
        by_key.setdefault((r["workload"], r["backend"]), {})[r["strategy"]] = r
    rows = []
    for (workload, backend), pair in by_key.items():
        spec, sym = pair.get("specialize"), pair.get("symbolic")
        row: dict[str, Any] = {"workload": workload, "backend": backend}
        for name, rec in (("specialize", spec), ("symbolic", sym)):
            row[f"{name}_status"] = rec["status"] if rec else "missing"
            if rec and rec["status"] == "ok":
                row[f"{name}_transition_s"] = rec["transition_s"]
                row[f"{name}_compiles"] = rec["compiles"]
            elif rec:
                row[f"{name}_error"] = rec.get("error")
        if spec and sym and spec["status"] == sym["status"] == "ok":
            row["transition_reduction"] = 1 - sym["transition_s"] / spec["transition_s"] if spec["transition_s"] else None
            ratios = [sym["steady_ms"][v] / spec["steady_ms"][v] for v in spec["steady_ms"] if v in sym["steady_ms"]]
            row["steady_slowdown"] = statistics.mean(ratios) - 1 if ratios else None
            row["steady_slowdown_range"] = [min(ratios) - 1, max(ratios) - 1] if ratios else None
        rows.append(row)
    return rows
