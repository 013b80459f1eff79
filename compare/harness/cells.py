"""What a worker needs for one cell, built from the run's config: its spec (a
``CellSpec``, plain JSON on the way: it may travel to another node), its identity, its log
path and its environment."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from compare.harness import environment
from compare.measure.timing import TimingConfig
from compare.results import protocol
from compare.results.protocol import CellMeasurement, CellSpec, DynamicSpec
from compare.results.roles import role_of
from compare.results.schema import Cell, variant_label
from compare.scenarios import cell_scenario

ALLOCATOR_VARS = ("LD_PRELOAD",)


def worker_env(config) -> dict[str, str]:
    """Same thread count for every backend's runtime, set before any import."""
    # The allocator is the run's, not whatever the parent happened to inherit.
    env = {k: v for k, v in os.environ.items()
           if k not in ALLOCATOR_VARS + environment.SPIN_VARS and not k.startswith("MALLOC_")}
    for var in environment.THREAD_VARS:
        env[var] = str(config.threads)
    env.update(config.malloc_env)
    if config.thread_spin == "short":
        env.update(environment.SHORT_SPIN_ENV)
    env["PYTHONUNBUFFERED"] = "1"
    # The project root on the path, so workers run from a plain checkout too.
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [str(environment.PROJECT_ROOT), env.get("PYTHONPATH", "")] if p
    )
    return env


def variant_key(workload, size: str, batch: int | None, dtype: str) -> str:
    """The cache key of one cell's model: the workload at that batch (through its
    params) and precision. fp32 keeps the plain key, so existing caches stay valid."""
    key = workload.with_batch(batch).key(size)
    return key if dtype == "fp32" else f"{key}-{dtype}"


# CellSpec fields made here from the run's config, not copied from its field of that name
SPEC_DERIVED = ("workload_files", "timing", "cache_root", "affinity", "interleave", "scenario", "scenario_options")


def shared_fields(config_type: type) -> tuple[str, ...]:
    """The CellSpec fields a cell takes from the RunConfig (``config_type``) field of the
    same name, as it is: a run option that reaches the worker is declared in both records
    and nowhere else."""
    run = {f.name for f in dataclasses.fields(config_type)}
    return tuple(f.name for f in dataclasses.fields(CellSpec) if f.name in run and f.name not in SPEC_DERIVED)


class CellSpecs:
    """Specs, identities and log paths of the cells of one run: the one place a ``CellSpec``
    is made from the run's config."""

    def __init__(self, config):
        self.config = config
        self.reference_dir: str | None = None  # set by an executor whose workers share a folder

    def planned(self, workload, backend: str, batch: int | None = None, dtype: str = "fp32", *,
                interleave: bool = False, dynamic: DynamicSpec | None = None
                ) -> tuple[CellSpec, None] | tuple[None, CellMeasurement]:
        """(the cell's spec, None), or (None, its failed measurement) when the spec cannot be
        built: an invalid user workload fails its cell, and the run goes on."""
        try:
            return self.spec(workload, backend, batch, dtype, interleave=interleave, dynamic=dynamic), None
        except Exception as exc:
            return None, protocol.ended("failed", f"{type(exc).__name__}: {exc}", transient=False)

    def spec(self, workload, backend: str, batch: int | None = None, dtype: str = "fp32", *,
             interleave: bool = False, dynamic: DynamicSpec | None = None) -> CellSpec:
        """Everything a worker needs to measure one cell. Raises for an invalid user workload."""
        cfg = self.config
        scenario = cell_scenario(workload.tags, cfg.scenario)  # a decoder's cells generate, whatever the run's
        return CellSpec(
            **{name: getattr(cfg, name) for name in shared_fields(type(cfg))},  # the run's value as it is
            workload=workload.name,
            # the file or --model spec the workload came from (paths resolved by make_config); the
            # worker resolves that one alone, not a census's hundreds
            workload_files=(workload.source,) if workload.source in cfg.workload_files else (),
            workload_key=variant_key(workload, cfg.size, batch, dtype),
            batch=batch,
            dtype=dtype,
            backend=backend,
            role=role_of(backend, dtype, cfg.reference),
            timing=TimingConfig(**cfg.timing),
            cache_root=str(Path(cfg.cache_root).resolve()),
            affinity=tuple(cfg.affinity) if cfg.affinity else None,
            interleave=interleave,
            # an experiment counts no work: its record has no roofline; nor does a cell timed not at all
            count_work=dynamic is None and not cfg.coverage_only,
            dynamic=dynamic,
            scenario=scenario,
            scenario_options=dict(cfg.scenario_options) if scenario == cfg.scenario else {},
            reference_dir=self.reference_dir,
        )

    def base(self, workload, backend: str, batch: int | None = None, dtype: str = "fp32") -> dict[str, Any]:
        """The cell's identity: ``Cell.from_measurement``'s keywords."""
        cfg = self.config
        return dict(workload=workload.name, backend=backend, role=role_of(backend, dtype, cfg.reference),
                    size=cfg.size, device=cfg.device, threads=cfg.threads, batch=batch, dtype=dtype)

    def cell(self, measurement: CellMeasurement, workload, backend: str, batch: int | None = None,
             dtype: str = "fp32", log: str | None = None) -> Cell:
        return Cell.from_measurement(measurement, **self.base(workload, backend, batch, dtype), log=log)

    @staticmethod
    def log_rel(workload, backend: str, batch, dtype: str, label: str = "") -> str:
        """The cell's worker log, relative to the run folder."""
        return f"logs/{variant_label(workload.name, batch, dtype)}.{backend}{label}.log"

    def env(self) -> dict[str, str]:
        return worker_env(self.config)
