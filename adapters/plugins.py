"""Plug-ins found by name: the classes of a package's own modules, then those other
installed packages add through an entry-point group. Backends (adapters/) and scenarios
(compare/scenarios/) are both found this way."""
from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import pkgutil
from typing import Any, Callable, Iterable


def _own(cls: type, module: str, package: bool) -> bool:
    return cls.__module__ == module


def named_classes(path: Iterable[str], package: str, base: type, group: str,
                  defined_in: Callable[[type, str, bool], bool] = _own) -> dict[str, Any]:
    """Every subclass of ``base`` with a ``name``, by name: those the package's modules define
    (``defined_in`` says where a class counts as defined), then the entry points of
    ``group``; a built-in name is never replaced."""
    classes: dict[str, Any] = {}
    for info in pkgutil.iter_modules(path):
        module = importlib.import_module(f"{package}.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, base) and getattr(cls, "name", "") and defined_in(cls, module.__name__, info.ispkg):
                classes[cls.name] = cls
    for entry in importlib.metadata.entry_points(group=group):
        cls = entry.load()
        if not (inspect.isclass(cls) and issubclass(cls, base) and getattr(cls, "name", "")):
            raise TypeError(f"entry point {entry.value!r} in {group} is not a named {base.__name__} class")
        classes.setdefault(cls.name, cls)
    return classes
