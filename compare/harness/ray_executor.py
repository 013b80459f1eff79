"""``--executor ray``: the same plan of cells, each cell a Ray task.

A task runs the very same worker process as the local executor
(``process.execute_worker``: own process group, timeout, memory limit) on
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

from compare.harness.executor import CellGroup, Executor, RunInterrupted
from compare.results import protocol
from compare.results.protocol import CellMeasurement, CellSpec

NODE_LOST = "worker killed by node loss"


def _run_on_node(spec_json: str, timeout_s: float, env: dict[str, str],
                 processes: int = 1) -> tuple[str, str, dict]:
    """Body of the Ray task: the local worker protocol on this node, in ``processes``
    fresh workers pooled as the local executor pools them. The spec and the measurement
    travel as their JSON: the protocol's own checks on both ends."""
    import ray

    from compare.harness.pooling import run_processes
    from compare.harness.process import execute_worker

    with tempfile.TemporaryDirectory(prefix="dlcompare-ray-") as tmp:
        log_path = Path(tmp) / "worker.log"
        cell = run_processes(CellSpec.from_json(spec_json), max(1, processes),
                             lambda worker_spec, _index: execute_worker(worker_spec, log_path, timeout_s, env))
        log_text = log_path.read_text(errors="replace") if log_path.exists() else ""
    node = {"hostname": socket.gethostname(), "node_id": ray.get_runtime_context().get_node_id()}
    return cell.to_json(), log_text, node


class RayExecutor(Executor):
    """Every cell a Ray task (``ray_address``: a cluster to join, else a local Ray);
    ``environment`` gets the executor's description."""

    def __init__(self, specs, hooks, output_dir, environment: dict[str, Any]):
        super().__init__(specs, hooks, output_dir)
        self.environment = environment
        self._pending: dict[Any, tuple[CellGroup, str]] = {}

    def run(self, groups: list[CellGroup]) -> None:
        import ray

        cfg = self.config
        started_here = self._init_ray()
        try:
            remote = ray.remote(_run_on_node).options(
                num_cpus=0.001 if cfg.ray_share_cores else cfg.threads,
                num_gpus=1 if cfg.device == "cuda" else 0,
                max_retries=0,  # a lost task is recorded as such, not silently rerun
            )
            for group in groups:
                for backend in group.backends:
                    self._submit(remote, group, backend)
            self._collect()
        except KeyboardInterrupt:
            self.kill()
            raise RunInterrupted() from None
        finally:
            if started_here:
                ray.shutdown()

    def _init_ray(self) -> bool:
        import ray

        cfg = self.config
        self.environment["executor"] = {"kind": "ray", "address": cfg.ray_address or "local",
                                        "ray": ray.__version__, "share_cores": cfg.ray_share_cores}
        if ray.is_initialized():
            return False
        if cfg.ray_address:
            ray.init(address=cfg.ray_address, log_to_driver=False, include_dashboard=False)
            return False
        ray.init(num_cpus=os.cpu_count(), log_to_driver=False, include_dashboard=False)
        return True

    def _submit(self, remote, group: CellGroup, backend: str) -> None:
        spec, failure = self.specs.planned(group.workload, backend, batch=group.batch, dtype=group.dtype)
        if spec is None:
            assert failure is not None  # planned gives one or the other
            self.hooks.record(self.specs.cell(failure, group.workload, backend, group.batch, group.dtype))
            return
        ref = remote.remote(spec.to_json(), self.config.timeout_s, self.specs.env(), self.config.processes)
        self._pending[ref] = (group, backend)

    def _collect(self) -> None:
        import ray

        while self._pending:
            ready, _ = ray.wait(list(self._pending), num_returns=1)
            group, backend = self._pending.pop(ready[0])
            log_rel = self.specs.log_rel(group.workload, backend, group.batch, group.dtype)
            try:
                answer, log_text, node = ray.get(ready[0])
                measurement = CellMeasurement.from_json(answer)
            except ray.exceptions.RayError as exc:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                measurement = protocol.ended("failed", f"{NODE_LOST}: {type(exc).__name__}: {first}", transient=True)
                log_text, node = "", {}
            (self.output_dir / log_rel).parent.mkdir(parents=True, exist_ok=True)
            (self.output_dir / log_rel).write_text(log_text)
            cell = self.specs.cell(measurement, group.workload, backend, group.batch, group.dtype, log=log_rel)
            cell.conditions.info = dict(cell.conditions.info or {}, node=node)
            self.hooks.announce(cell.label, backend)
            self.hooks.record(cell)

    def kill(self) -> None:
        import ray

        for ref in self._pending:
            ray.cancel(ref, force=True)
