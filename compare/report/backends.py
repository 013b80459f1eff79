"""The backend classes, for what each contributes to the reports (its notes, its reproducer,
its failure verdicts): ``adapters.backend_class``, the base class for a backend not installed
here (its cells still show, without its own notes)."""
from __future__ import annotations

from adapters import backend_class

__all__ = ["backend_class"]
