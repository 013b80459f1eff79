"""``--executor ray``: the same plan of cells, each cell a Ray task.

A task runs the very same worker process as the local runner
(``runner.execute_worker``: own process group, timeout, memory limit) on
whichever node Ray places it, and returns the cell's fields, its log and the
node it ran on. Each task asks for as many CPUs as the run's ``--threads`` (and
a GPU on ``--device cuda``), so two timed cells never share a node's cores
unless ``--ray-share-cores`` says so. Results stream into the same
results.json as tasks finish. A task lost with its node becomes a failed cell
marked transient, which ``--resume`` runs again.

Tuning logs and warm caches live in ``--tuning-logs``: on a cluster, point it
at a folder every node mounts (NFS or similar); the file locks and
rename-into-place writes of the store keep concurrent tasks from corrupting it.
Without ``--ray-address`` a local Ray instance is started on this machine.
"""
from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path
from typing import Any

NODE_LOST = "worker killed by node loss"  # prefix that --resume treats as transient


def _run_on_node(spec: dict[str, Any], timeout_s: float, env: dict[str, str],
                 processes: int = 1) -> tuple[dict, str, dict]:
    """Body of the Ray task: the local worker protocol on this node, in ``processes``
    fresh workers pooled as the local runner pools them."""
    import ray

    from .pooling import pool_processes
    from .process import execute_worker

    with tempfile.TemporaryDirectory(prefix="dlcompare-ray-") as tmp:
        log_path = Path(tmp) / "worker.log"
        runs = []
        for index in range(max(1, processes)):
            runs.append(execute_worker(dict(spec, process_index=index), log_path, timeout_s, env))
            if runs[-1].get("status") != "ok":
                break
        cell = pool_processes(runs)
        log_text = log_path.read_text(errors="replace") if log_path.exists() else ""
    node = {"hostname": socket.gethostname(), "node_id": ray.get_runtime_context().get_node_id()}
    return cell, log_text, node


def run_cells(runner, results, cells: list[tuple[Any, str, Any, str]], address: str | None = None,
              share_cores: bool = False) -> None:
    """Fan ``cells`` (workload object, backend, batch, dtype) out as Ray tasks; record each as it lands."""
    import ray

    from .runner import RunInterrupted, worker_env
    from .results import Cell, variant_label

    cfg = runner.config
    started_here = False
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=False, include_dashboard=False)
        else:
            ray.init(num_cpus=os.cpu_count(), log_to_driver=False, include_dashboard=False)
            started_here = True
    results.environment["executor"] = {"kind": "ray", "address": address or "local",
                                       "ray": ray.__version__, "share_cores": share_cores}
    remote = ray.remote(_run_on_node).options(
        num_cpus=0.001 if share_cores else cfg.threads,
        num_gpus=1 if cfg.device == "cuda" else 0,
        max_retries=0,  # a lost task is recorded as such, not silently rerun
    )
    env = worker_env(cfg)
    pending: dict[Any, tuple[Any, str, dict]] = {}
    for workload, backend, batch, dtype in cells:
        base = runner.cell_base(workload, backend, batch, dtype)
        try:
            spec = runner.cell_spec(workload, backend, batch=batch, dtype=dtype)
        except Exception as exc:
            results.upsert(Cell(status="failed", error=f"{type(exc).__name__}: {exc}", **base))
            continue
        pending[remote.remote(spec, cfg.timeout_s, env, cfg.processes)] = (workload, backend, base)
    done = 0
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            ref = ready[0]
            workload, backend, base = pending.pop(ref)
            log_rel = f"logs/{variant_label(workload.name, base['batch'], base['dtype'])}.{backend}.log"
            try:
                data, log_text, node = ray.get(ref)
            except ray.exceptions.RayError as exc:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                data, log_text, node = {"status": "failed", "error": f"{NODE_LOST}: {type(exc).__name__}: {first}"}, "", {}
            (runner.output_dir / log_rel).parent.mkdir(parents=True, exist_ok=True)
            (runner.output_dir / log_rel).write_text(log_text)
            cell = runner._as_cell({**base, **data, "log": log_rel})
            cell.info = dict(cell.info or {}, node=node)
            results.upsert(cell)
            runner.save(results)
            done += 1
            runner.progress.cell_started(done, done + len(pending), cell.label, backend)
            runner.progress.cell_finished(cell)
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise RunInterrupted() from None
    finally:
        if started_here:
            ray.shutdown()
