"""Make a CUDA build of torchvision importable beside a CPU torch, at interpreter start.

The registry's torchvision 0.28.0 (the release built for torch 2.13) is a CUDA build: its C++
ops (nms, roi_align) cannot load beside torch 2.13.0+cpu, and ``import torchvision`` then fails
registering their fake kernels ("operator torchvision::nms does not exist"), which takes
transformers and timm down with it. No model needs those ops: a stand-in for
``torchvision._meta_registrations`` in ``sys.modules`` skips that registration, so
classification and segmentation models build (a detection model's nms raises when called).

dlcompare installs ``dlcompare_torchvision_guard.pth`` into site-packages (normal and editable
installs, see build_backend/dlcompare_build.py), whose one line imports this module: every
interpreter of the environment applies the guard before user code runs. It imports neither
torch nor torchvision (it finds both with ``importlib.util.find_spec`` and reads their
``version.py``), acts only for a ``+cpu`` torch beside a ``+cu`` torchvision, and never
raises. ``DLCOMPARE_TORCHVISION_GUARD=0`` turns it off. ``workloads.zoo.guard_torchvision``
calls ``apply`` too.
"""
from __future__ import annotations

import os
import sys

STAND_IN = "torchvision._meta_registrations"
DISABLE_ENV = "DLCOMPARE_TORCHVISION_GUARD"


def needs_guard(torch_version: str | None, torchvision_version: str | None) -> bool:
    """True for a CPU build of torch beside a CUDA build of torchvision, and only then."""
    return bool(torch_version and torchvision_version and "+cpu" in torch_version and "+cu" in torchvision_version)


def read_version(version_file: str) -> str | None:
    """``__version__`` of a ``version.py`` (torch's and torchvision's), read without importing it."""
    try:
        with open(version_file, encoding="utf-8") as f:
            for line in f:
                name, sep, value = line.partition("=")
                if sep and name.strip() == "__version__":
                    return value.strip().strip("'\"")
    except OSError:
        pass
    return None


def installed_version(package: str) -> str | None:
    """The installed ``package``'s version from its ``version.py``; None when it is absent. Finds
    the package without importing it (``find_spec`` of a top-level name imports nothing)."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        version = read_version(os.path.join(location, "version.py"))
        if version is not None:
            return version
    return None


def apply(torch_version: str | None = None) -> bool:
    """Put the stand-in in ``sys.modules`` when torch is a CPU build and torchvision a CUDA one.
    ``torch_version``: ``torch.__version__`` where torch is imported already (else read from its
    version file). True when the stand-in is in place."""
    if os.environ.get(DISABLE_ENV, "").strip().lower() in ("0", "false", "no", "off"):
        return False
    if torch_version is None:
        torch_version = installed_version("torch")
    if not torch_version or "+cpu" not in torch_version:
        return False  # the common case: no torchvision read at all
    if not needs_guard(torch_version, installed_version("torchvision")):
        return False
    if STAND_IN not in sys.modules:
        import types

        sys.modules[STAND_IN] = types.ModuleType(STAND_IN)
    return True


def _at_start() -> None:
    """What the .pth runs: the guard, and never an exception (a .pth line that raises prints a
    traceback at every start)."""
    try:
        apply()
    except Exception:
        pass


_at_start()
