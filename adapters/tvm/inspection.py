"""A cure for TVMScript's slow imports, for the TVM adapter and its builder processes.

Every ``@T.prim_func`` calls ``inspect.stack()``, and for each frame it cannot map to a
module (the import machinery's ``<frozen importlib...>`` frames, ``<string>``)
``inspect.getmodule`` scans all of ``sys.modules`` again. MetaSchedule imports about 500
tensor intrinsics that way (``tvm.s_tir.tensor_intrin``), in the tuning process and
again in every builder process, which it restarts each search round: 97 s per import on
this 2-core VM, 11 s with the misses remembered. That fixed cost, not measuring
candidates, was most of TVM's tuning time.
"""
from __future__ import annotations

import inspect
import sys

_original_getmodule = inspect.getmodule
_misses: dict[str, int] = {}  # file name -> len(sys.modules) when it mapped to no module


def _getmodule(object, _filename=None):  # noqa: A002 (inspect's own signature)
    key = _filename if _filename is not None else getattr(getattr(object, "f_code", object), "co_filename", None)
    if key is not None and _misses.get(key) == len(sys.modules):
        return None
    module = _original_getmodule(object, _filename)
    if module is None and key is not None:
        _misses[key] = len(sys.modules)
    return module


def install() -> None:
    """Remember getmodule's misses until sys.modules changes (idempotent; also MetaSchedule's
    builder initializer, so it runs in every builder process)."""
    inspect.getmodule = _getmodule
