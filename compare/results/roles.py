"""The reference as a role, declared here once.

A run compares every backend with one reference backend: eager PyTorch unless the run
names another (``RunConfig.reference``). Each cell carries its role, ``reference`` or
``candidate``, and everything downstream (derived figures, reports, diffs) reads the role,
never a backend's name. A weight-only cell of the reference backend is a candidate: it runs
torchao's recipe, timed against the fp32 reference like every other backend's.

Inside a candidate's worker the reference is timed alternately with it; that in-cell
side's figures sit under ``REFERENCE_SIDE`` in the cell's decode, throughput and server
records (the name result files have always used).
"""
from __future__ import annotations

from compare.measure.numerics import WEIGHT_ONLY

REFERENCE_BACKEND = "eager"  # the default reference
REFERENCE, CANDIDATE = "reference", "candidate"
ROLES = (REFERENCE, CANDIDATE)
REFERENCE_SIDE = "eager"  # the in-cell reference's key in a cell's records


def role_of(backend: str, dtype: str, reference: str = REFERENCE_BACKEND) -> str:
    """A cell's role in a run whose reference backend is ``reference``."""
    return REFERENCE if backend == reference and dtype not in WEIGHT_ONLY else CANDIDATE


def reference_first(backends: list[str], reference: str = REFERENCE_BACKEND) -> list[str]:
    """The run's backends with the reference first, as the harness times them."""
    return [reference] + [b for b in backends if b != reference]
