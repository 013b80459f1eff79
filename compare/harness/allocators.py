"""``--allocator``: which malloc every worker runs with, the same for all backends.

The allocator moves eager (which allocates every intermediate) more than most
compilers (which plan their buffers), so it is a run condition shown beside every
headline figure, never a hidden default:

- ``system``: glibc as it comes (what most users run): measured here, eager
  norm_residual ran at 25 ms in some processes and 52 ms in others (page-fault storms);
- ``glibc-tuned``: glibc serving large buffers from the heap and never trimming it
  (``MALLOC_MMAP_MAX_=0``, a huge ``MALLOC_TRIM_THRESHOLD_``): no page-fault storm per
  call, no library needed; but where the heap puts each buffer depends on the process's
  history, and eager norm_residual moved by up to ±20 % from process to process;
- ``jemalloc`` / ``tcmalloc``: preloaded, as PyTorch's CPU performance guide advises.
  tcmalloc gave the same speed as glibc-tuned with the process-to-process spread of
  eager norm_residual down to ±4 %. jemalloc takes the guide's ``MALLOC_CONF`` except
  the decay times: the guide's ``dirty_decay_ms:9000000000`` made Debian's jemalloc 5.3
  return pages on every call (the pointwise chain 4x slower); -1 ("never") is what it means;
- ``mimalloc``: preloaded from the ``cmeel-mimalloc`` wheel, a dependency of dlcompare, so
  every install has it, the same version on every machine, with no system package. Its
  process-to-process spread of eager matched tcmalloc's (issue 43, docs/method.md). It runs
  with ``MIMALLOC_PURGE_DELAY=-1``: freed pages stay with it, as under every other setting;
- ``auto`` (the default): mimalloc, which the project's own install brings (the README's
  path got glibc-tuned before, whose intervals missed between runs: issue 43); glibc-tuned
  where its library is somehow missing. The run records and prints which.
"""
from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path

ALLOCATORS = ("auto", "system", "glibc-tuned", "jemalloc", "tcmalloc", "mimalloc")
DEFAULT_ALLOCATOR = "auto"
GLIBC_TUNED_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**36)}
# PyTorch's CPU performance tuning guide (jemalloc section).
JEMALLOC_CONF = "oversize_threshold:1,background_thread:true,metadata_thp:auto,dirty_decay_ms:-1,muzzy_decay_ms:-1"
LIBRARIES = {"jemalloc": ("libjemalloc.so.2", "libjemalloc.so"),
             "tcmalloc": ("libtcmalloc.so.4", "libtcmalloc_minimal.so.4", "libtcmalloc.so")}
INSTALL_HINT = {"jemalloc": "apt-get install libjemalloc2", "tcmalloc": "apt-get install libtcmalloc-minimal4",
                "mimalloc": "pip install cmeel-mimalloc"}
# Allocators that a Python wheel brings: the distribution and its library's file name.
WHEEL_LIBRARIES = {"mimalloc": ("cmeel-mimalloc", "libmimalloc.so.3")}
# Freed pages are never handed back while a cell runs (mimalloc's default purges after 10 ms),
# as glibc-tuned's trim threshold and jemalloc's decay of -1 keep them.
MIMALLOC_ENV = {"MIMALLOC_PURGE_DELAY": "-1"}


class AllocatorMissing(ValueError):
    """The chosen allocator's library is not on this machine (one-line message)."""


def find_library(name: str) -> Path | None:
    """The shared library of ``name``: from its wheel (mimalloc), else as the dynamic linker
    knows it (ldconfig -p)."""
    if name in WHEEL_LIBRARIES:
        return wheel_library(*WHEEL_LIBRARIES[name])
    try:
        listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        listing = ""
    for soname in LIBRARIES[name]:
        for line in listing.splitlines():
            if line.strip().startswith(soname + " ") and "=>" in line:
                path = Path(line.split("=>", 1)[1].strip())
                if path.exists():
                    return path
    return None


def wheel_library(distribution: str, filename: str) -> Path | None:
    """A shared library shipped inside an installed wheel, found through its file list."""
    try:
        files = metadata.files(distribution) or []
    except metadata.PackageNotFoundError:
        return None
    path = next((Path(str(f.locate())) for f in files if f.name == filename), None)
    return path if path is not None and path.exists() else None


def resolve(name: str) -> str:
    """The allocator ``name`` stands for on this machine (``auto``: mimalloc, from the
    project's own install, where its wheel is there)."""
    if name == "auto":
        return "mimalloc" if find_library("mimalloc") is not None else "glibc-tuned"
    return name


def allocator_env(name: str) -> dict[str, str]:
    """Environment variables that select ``name`` (resolved) in a worker started afterwards."""
    if name not in ALLOCATORS or name == "auto":
        raise AllocatorMissing(f"unknown allocator {name!r} (known: {', '.join(ALLOCATORS)})")
    if name == "system":
        return {}
    if name == "glibc-tuned":
        return dict(GLIBC_TUNED_ENV)
    library = find_library(name)
    if library is None:
        raise AllocatorMissing(f"--allocator {name}: {LIBRARIES[name][0]} not found on this machine; "
                               f"install it with: {INSTALL_HINT[name]}")
    env = {"LD_PRELOAD": str(library)}
    if name == "jemalloc":
        env["MALLOC_CONF"] = JEMALLOC_CONF
    if name == "mimalloc":
        env.update(MIMALLOC_ENV)
    return env
