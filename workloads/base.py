"""The small API every workload is defined through.

A workload is a plain ``torch.nn.Module`` factory plus a description of its
inputs for each size. Inputs are generated from a fixed seed, so every backend
(and every run) sees exactly the same tensors.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

SIZES = ("small", "default", "large")
DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32")
# Refuse absurd inputs before allocating anything: 2**31 elements is 8 GiB of fp32.
MAX_INPUT_ELEMENTS = 2**31


class WorkloadError(ValueError):
    """A workload definition is invalid; the message names the workload and field."""


@dataclass(frozen=True)
class TensorSpec:
    """One input tensor: its shape, dtype, how to fill it, and which dims may vary."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    name: str = "x"
    # dim index -> symbolic name ("batch", "seq"); used by dynamic-shape experiments
    dynamic_dims: Mapping[int, str] = field(default_factory=dict)
    # "randn" (normal), "rand" (uniform [0,1)), "randint:<high>" for index inputs, or "ones"
    # (an attention mask that attends to every token, as real inference passes it)
    init: str = "randn"

    def numel(self) -> int:
        return math.prod(self.shape)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "dynamic_dims": {str(k): v for k, v in self.dynamic_dims.items()},
            "init": self.init,
        }


@dataclass(frozen=True)
class Workload:
    """A named PyTorch module with seeded inputs at several sizes.

    ``sizes`` maps a size name ("small", "default", "large") to a dict of
    parameters; ``build(params)`` returns the module and ``inputs(params)`` the
    list of ``TensorSpec`` for that size.
    """

    name: str
    description: str
    sizes: Mapping[str, Mapping[str, Any]]
    build: Callable[[Mapping[str, Any]], Any]
    inputs: Callable[[Mapping[str, Any]], list[TensorSpec]]
    tags: tuple[str, ...] = ()
    source: str = "builtin"  # file the workload came from
    # The size parameter that is the batch dimension ("batch"); ``--batch`` overrides
    # it. None: the workload has no batch dimension and runs at its own size only.
    batch_param: str | None = None

    # -- validation ---------------------------------------------------------
    def validate(self) -> None:
        where = f"workload {self.name!r} ({self.source})"
        if not isinstance(self.name, str) or not self.name.replace("_", "").replace("-", "").isalnum():
            raise WorkloadError(f"{where}: field 'name' must be a non-empty identifier-like string")
        if not isinstance(self.description, str):
            raise WorkloadError(f"{where}: field 'description' must be a string")
        if not isinstance(self.sizes, Mapping) or not self.sizes:
            raise WorkloadError(f"{where}: field 'sizes' must be a non-empty dict of size name -> parameters")
        for size, params in self.sizes.items():
            if not isinstance(params, Mapping):
                raise WorkloadError(f"{where}: sizes[{size!r}] must be a dict of parameters")
        if not callable(self.build):
            raise WorkloadError(f"{where}: field 'build' must be callable (params -> nn.Module)")
        if not callable(self.inputs):
            raise WorkloadError(f"{where}: field 'inputs' must be callable (params -> list[TensorSpec])")
        if self.batch_param is not None:
            for size, params in self.sizes.items():
                if self.batch_param not in params:
                    raise WorkloadError(f"{where}: batch_param {self.batch_param!r} is not a parameter of size {size!r}")

    def params(self, size: str) -> Mapping[str, Any]:
        if size not in self.sizes:
            raise WorkloadError(
                f"workload {self.name!r} has no size {size!r} (has: {', '.join(self.sizes)})"
            )
        return self.sizes[size]

    def with_batch(self, batch: int | None) -> "Workload":
        """The same workload with its batch dimension set to ``batch`` at every size
        (None: unchanged). Caches see the new batch through ``key()``'s params."""
        if batch is None:
            return self
        if self.batch_param is None:
            raise WorkloadError(f"workload {self.name!r} has no batch dimension (batch_param is not set)")
        if not isinstance(batch, int) or isinstance(batch, bool) or batch <= 0:
            raise WorkloadError(f"workload {self.name!r}: batch must be a positive integer, got {batch!r}")
        sizes = {name: {**params, self.batch_param: batch} for name, params in self.sizes.items()}
        return dataclasses.replace(self, sizes=sizes)

    def batch_of(self, size: str) -> int | None:
        """The batch this size runs at, or None for a workload without a batch dimension."""
        return None if self.batch_param is None else self.params(size).get(self.batch_param)

    def input_specs(self, size: str) -> list[TensorSpec]:
        specs = self.inputs(self.params(size))
        where = f"workload {self.name!r} ({self.source}) size {size!r}"
        if not isinstance(specs, (list, tuple)) or not specs:
            raise WorkloadError(f"{where}: 'inputs' must return a non-empty list of TensorSpec")
        for i, spec in enumerate(specs):
            if not isinstance(spec, TensorSpec):
                raise WorkloadError(f"{where}: input {i} is {type(spec).__name__}, not TensorSpec")
            if not isinstance(spec.shape, tuple) or not all(
                isinstance(d, int) and not isinstance(d, bool) for d in spec.shape
            ):
                raise WorkloadError(f"{where}: input {spec.name!r} shape must be a tuple of ints, got {spec.shape!r}")
            if any(d <= 0 for d in spec.shape):
                raise WorkloadError(f"{where}: input {spec.name!r} shape {spec.shape} has a zero or negative dimension")
            if spec.numel() > MAX_INPUT_ELEMENTS:
                raise WorkloadError(
                    f"{where}: input {spec.name!r} shape {spec.shape} has {spec.numel():.3g} elements "
                    f"(limit {MAX_INPUT_ELEMENTS:.3g})"
                )
            if spec.dtype not in DTYPES:
                raise WorkloadError(f"{where}: input {spec.name!r} dtype {spec.dtype!r} not one of {DTYPES}")
            if not _valid_init(spec.init):
                raise WorkloadError(
                    f"{where}: input {spec.name!r} init {spec.init!r} is not 'randn', 'rand', 'ones' or 'randint:<high>'")
            for dim in spec.dynamic_dims:
                if not (0 <= int(dim) < len(spec.shape)):
                    raise WorkloadError(f"{where}: input {spec.name!r} dynamic dim {dim} out of range")
        return list(specs)

    # -- identity -----------------------------------------------------------
    def key(self, size: str) -> str:
        """A short stable key for caches: name, size params and input shapes/dtypes."""
        payload = {
            "name": self.name,
            "params": _jsonable(dict(self.params(size))),
            "inputs": [s.to_dict() for s in self.input_specs(size)],
        }
        digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]
        return f"{self.name}-{size}-{digest}"

    def describe(self, size: str) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "size": size,
            "params": _jsonable(dict(self.params(size))),
            "inputs": [s.to_dict() for s in self.input_specs(size)],
            "source": self.source,
        }

    def with_source(self, source: str) -> "Workload":
        return dataclasses.replace(self, source=source)


def lazy(module: str, name: str) -> Callable[..., Any]:
    """A constructor for ``workloads.<module>.<name>`` that imports the module on its first
    call: the definitions can name a torch module without importing torch."""

    def construct(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(f"workloads.{module}"), name)(*args, **kwargs)

    construct.__qualname__ = construct.__name__ = name
    return construct


def _valid_init(init: Any) -> bool:
    if init in ("randn", "rand", "ones"):
        return True
    if isinstance(init, str) and init.startswith("randint:"):
        high = init.split(":", 1)[1]
        return high.isdigit() and int(high) > 0
    return False


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
