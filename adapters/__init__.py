"""Backends, one module each, behind the interface in ``adapters.base``."""
from __future__ import annotations

from .base import Backend, BackendUnavailable, CacheVerdict, Compiled, CompileContext, CompileResult, flatten_outputs

__all__ = ["Backend", "BackendUnavailable", "CacheVerdict", "Compiled", "CompileContext", "CompileResult", "flatten_outputs", "get_backend", "backend_names"]


def _registry() -> dict[str, type[Backend]]:
    # Imported lazily: adapter modules import their compiler only inside methods,
    # so listing backends never pays for (or fails on) a missing package.
    from .eager import EagerBackend
    from .inductor import InductorBackend
    from .iree import IreeBackend
    from .ort import OrtBackend
    from .tvm import TvmBackend, TvmUntunedBackend

    classes: list[type[Backend]] = [EagerBackend, InductorBackend, OrtBackend, TvmUntunedBackend, TvmBackend,
                                     IreeBackend]
    return {cls.name: cls for cls in classes}


def backend_names() -> list[str]:
    return list(_registry())


def get_backend(name: str) -> Backend:
    registry = _registry()
    if name not in registry:
        raise KeyError(f"unknown backend {name!r} (known: {', '.join(registry)})")
    return registry[name]()
