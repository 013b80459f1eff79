"""Backends, one module each, behind the interface in ``adapters.base``.

A backend is found, not listed: every module of this package that defines a ``Backend``
subclass with a ``name`` brings it, and another installed package can add one through
the ``dlcompare.backends`` entry-point group (``name = "package.module:Class"``).
Everything else about it (its packages, options, CLI flags, phases) comes from its class.
"""
from __future__ import annotations

import functools
import importlib
from typing import Any

from .base import (
    Backend,
    BackendOptions,
    BackendUnavailable,
    CacheVerdict,
    CommandUsage,
    CompileContext,
    Compiled,
    CompileResult,
    flatten_outputs,
)
from .plugins import named_classes

__all__ = ["Backend", "BackendOptions", "BackendUnavailable", "CacheVerdict", "CommandUsage", "Compiled",
           "CompileContext", "CompileResult", "backend_class", "backend_classes", "backend_names", "backend_subcommands",
           "flatten_outputs", "get_backend", "split_variant"]

ENTRY_POINT_GROUP = "dlcompare.backends"


def _defined_in(cls: type, module: str, package: bool) -> bool:
    """In that module, or in a backend package's own modules (adapters/tvm/): a backend
    imported from elsewhere is found where it is defined, once."""
    return cls.__module__ == module or (package and cls.__module__.startswith(module + "."))


@functools.cache
def backend_classes() -> dict[str, type[Backend]]:
    """Every backend by name, eager first, then in the order of ``Backend.rank``."""
    # Adapter modules import their compiler only inside methods, so importing every one
    # never pays for (or fails on) a missing package.
    classes = named_classes(__path__, __name__, Backend, ENTRY_POINT_GROUP, _defined_in)
    return dict(sorted(classes.items(), key=lambda item: (item[1].rank, item[0])))


def backend_names() -> list[str]:
    return list(backend_classes())


def backend_subcommands() -> dict[str, Any]:
    """The subcommands backends bring (``Backend.subcommand``), by name: each module once."""
    modules = dict.fromkeys(cls.subcommand for cls in backend_classes().values() if cls.subcommand)
    found: dict[str, Any] = {}
    for name in modules:
        module = importlib.import_module(name)
        for command in (module.NAME, *getattr(module, "ALIASES", ())):
            found[command] = module
    return found


def split_variant(name: str) -> tuple[str, dict[str, str]]:
    """``ort:ort-spinning=on:onnx-opset=18`` -> ("ort", {"ort-spinning": "on", "onnx-opset": "18"})."""
    base, *parts = name.split(":")
    flags = {}
    for part in parts:
        flag, sep, value = part.partition("=")
        if not sep or not flag or not value:
            raise ValueError(f"backend variant {name!r}: {part!r} is not FLAG=VALUE")
        flags[flag.removeprefix("--")] = value
    return base, flags


def backend_class(name: str) -> type[Backend]:
    """The class of backend ``name`` (a variant's base), for what it says of its own cells
    (notes, reproducer, failure verdicts) without being built; the base class for a backend
    not installed here."""
    try:
        return backend_classes().get(split_variant(name)[0], Backend)
    except ValueError:
        return Backend


def get_backend(name: str) -> Backend:
    """The backend called ``name``: a registered one, or a variant of one (``BASE:FLAG=VALUE``).
    KeyError for an unknown base, ValueError for a bad variant."""
    base, flags = split_variant(name)
    registry = backend_classes()
    if base not in registry:
        raise KeyError(f"unknown backend {base!r} (known: {', '.join(registry)})")
    backend = registry[base]()
    if flags:
        try:
            backend.variant = backend.options_type.parse_variant(flags)
        except ValueError as exc:
            raise ValueError(f"backend variant {name!r}: {exc}") from None
        backend.name = name
    return backend
