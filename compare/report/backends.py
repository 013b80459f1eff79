"""The backend classes, for what each contributes to the reports (its notes, its reproducer)."""
from __future__ import annotations


def backend_class(name: str):
    """The backend's class, for what it contributes to the reports; the base class for a
    backend not installed here (its cells still show, without its own notes)."""
    from adapters import backend_classes, split_variant
    from adapters.base import Backend

    try:
        return backend_classes().get(split_variant(name)[0], Backend)
    except ValueError:
        return Backend
