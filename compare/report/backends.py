"""The backend classes, for what each contributes to the reports (its notes, its reproducer)."""
from __future__ import annotations


def backend_class(name: str):
    """The backend's class, for what it contributes to the reports; the base class for a
    backend not installed here (its cells still show, without its own notes)."""
    from adapters import backend_class as of_name

    return of_name(name)
