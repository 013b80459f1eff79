"""``python -m compare bisect RUN_DIR --cell WORKLOAD/BACKEND``, the parent: it plans the
cell exactly as the run did, starts the bisect worker (``python -m
compare.experiments.bisect SPEC``, which does the work: see that module) and prints what it
found. A command, above the harness it plans with."""
from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from compare.results.protocol import BisectSpec, CellSpec


def cell_spec(run_dir: Path, cell_name: str) -> tuple[CellSpec, str, bool | None, dict[str, str]]:
    """The worker spec of ``WORKLOAD/BACKEND`` in a stored run, as the run planned it, with
    the cell's label, whether its numerics agreed, and its workers' environment."""
    from compare.config import UsageError
    from compare.harness.cells import CellSpecs
    from compare.harness.runner import RunConfig
    from compare.measure.numerics import QUANTIZED_DTYPES
    from compare.results.schema import RunResults
    from workloads import resolve_workloads

    label, _, backend = cell_name.rpartition("/")
    results = RunResults.load(run_dir)
    cell = next((c for c in results.cells if c.label == label and c.backend == backend), None)
    if cell is None or cell.is_reference:
        known = ", ".join(f"{c.label}/{c.backend}" for c in results.cells if not c.is_reference)
        raise UsageError(f"no cell {cell_name!r} to bisect in {run_dir} (cells: {known or 'none'})")
    if cell.dtype in QUANTIZED_DTYPES:  # op by op against float64 means nothing for a whole-graph quantizer
        raise UsageError(f"{cell_name}: an {cell.dtype} cell cannot be bisected (its quantizer rewrites the whole "
                         "graph; its accuracy is judged against fp32 eager as a whole)")
    try:
        config = RunConfig(**results.config)
    except TypeError as exc:
        raise UsageError(f"{run_dir}: its config cannot be read by this dlcompare ({exc})") from None
    (workload,) = resolve_workloads([cell.workload], config.workload_files, "all")
    specs = CellSpecs(config)
    return specs.spec(workload, backend, batch=cell.batch, dtype=cell.dtype), label, cell.numerics.numerics_ok, specs.env()


def run(args, console) -> int:
    from compare.config import UsageError

    run_dir = Path(args.run_dir)
    if not (run_dir / "results.json").is_file() and not run_dir.is_file():
        raise UsageError(f"{run_dir}: no results.json there")
    # env: the worker's environment, as the run's workers had it (not written to disk)
    cell, label, numerics_ok, env = cell_spec(run_dir if run_dir.is_dir() else run_dir.parent, args.cell)
    out = (run_dir if run_dir.is_dir() else run_dir.parent) / "bisect" / f"{label}.{cell.backend}"
    out.mkdir(parents=True, exist_ok=True)
    cell = dataclasses.replace(cell, work_dir=tempfile.mkdtemp(prefix="dlcompare-bisect-"))
    spec = BisectSpec(cell=cell, label=label, out_dir=str(out.resolve()), factor=args.factor)
    (out / "spec.json").write_text(spec.to_json())
    if numerics_ok:
        console.print(f"{args.cell} agreed with eager in the run; bisecting on demand", highlight=False)
    found = out / "bisect.json"
    found.unlink(missing_ok=True)
    try:
        returncode = run_worker(out / "spec.json", env, args.timeout)
    finally:
        shutil.rmtree(cell.work_dir, ignore_errors=True)
    if returncode != 0 or not found.is_file():
        console.print(f"[red]bisect failed[/red]: its worker ended with {returncode} (see the lines above)")
        return 1
    print_finding(json.loads(found.read_text()), out, console)
    return 0


def run_worker(spec_path: Path, env: dict[str, str], timeout: float) -> int | str:
    """The bisect worker's exit status, or why it has none. It runs in a process group of
    its own, killed as one on a timeout or Ctrl-C: a backend that compiles in child
    processes (TVM's builders, IREE's compiler) would otherwise outlive the bisect, still
    loading the machine, as the runner's workers never do."""
    from compare.harness.process import kill_group

    proc = subprocess.Popen([sys.executable, "-m", "compare.experiments.bisect", str(spec_path)], env=env,
                            start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"a timeout after {timeout:g} s"
    finally:
        kill_group(proc)  # the worker's group, whatever ended the wait; nothing if it exited


def print_finding(finding: dict[str, Any], out: Path, console) -> None:
    import pandas as pd

    rows = [{"prefix ends at": f"#{p['index']} {p['node']}", "verdict": "bad" if p["bad"] else "ok",
             "worst value": (p["worst"] or {}).get("node", "-"),
             "error vs fp64": _e((p["worst"] or {}).get("error")), "eager's": _e((p["worst"] or {}).get("eager_error")),
             "failure": (p["failure"] or "")[:80]} for p in finding["probes"]]
    console.print(f"\n[bold]bisect {finding['cell']}/{finding['backend']}[/bold]: {finding['ops']} ops, "
                  f"{len(rows)} prefixes compiled", highlight=False)
    console.print(pd.DataFrame(rows).to_markdown(index=False), highlight=False)
    if finding["node"] is None:
        console.print(finding["note"], highlight=False)
        return
    iso = finding["isolated"] or {}
    console.print(f"first bad op: {finding['node']} = {finding['op']}", highlight=False)
    console.print(f"alone: error vs float64 {_e(iso.get('error'))} against eager's {_e(iso.get('eager_error'))} "
                  f"({'reproduced' if iso.get('bad') else 'not reproduced alone'})"
                  + (f"; {finding['isolated_failure']}" if finding["isolated_failure"] else ""), highlight=False)
    if finding["reproducer"]:
        console.print(f"reproducer: {finding['reproducer']} (exits 1 while the op is wrong)", highlight=False)
    console.print(f"details: {out / 'bisect.json'}", highlight=False)


def _e(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"
