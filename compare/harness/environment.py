"""What machine and software a run measured: recorded with every result."""
from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout (compare/harness/environment.py)

# Environment variables that change how fast code runs; every worker gets the same.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TVM_NUM_THREADS")

# How long an idle pool thread spins before it sleeps, for every runtime that spins by
# default. torch's (and Inductor's) OpenMP threads spun about 10 ms of CPU after every
# parallel region and TVM's pool spins 300,000 rounds: on 2 cores that is a core taken
# from whatever runs next, so the callable timed after eager (or after TVM) paid for it.
# Short spins keep back-to-back kernels hot inside one call and let the pool sleep
# between calls. ORT's spinning is off in its session options; IREE's workers do not spin.
SHORT_SPIN_ENV = {"GOMP_SPINCOUNT": "10000", "TVM_THREAD_POOL_SPIN_COUNT": "10000"}
SPIN_VARS = tuple(SHORT_SPIN_ENV)

# Always recorded; each backend adds the packages it declares (``Backend.packages``).
BASE_DISTRIBUTIONS = ("torch", "numpy")


def tracked_distributions() -> tuple[str, ...]:
    """The packages whose versions a run records and ``--resume`` checks."""
    from adapters import backend_classes

    declared = [dist for cls in backend_classes().values() for dist in cls.packages]
    return tuple(dict.fromkeys([*BASE_DISTRIBUTIONS, *declared]))


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_model() -> str:
    from adapters.base import host_cpu_name

    return host_cpu_name()


def cpu_flags() -> list[str]:
    """ISA extensions that decide which kernels a compiler can emit (AVX-512, AMX, ...)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                return sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "sse4", "f16c")))
    except OSError:
        pass
    return []


def git_commit() -> dict[str, Any]:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10,
        )
        if commit.returncode == 0:
            return {"commit": commit.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        pass
    return {"commit": None, "dirty": None}


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in tracked_distributions():
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def gpu_info() -> list[dict[str, Any]]:
    """GPUs visible through nvidia-smi (no torch import needed in the parent)."""
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version,compute_cap", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    if proc.returncode == 0:
        for line in proc.stdout.strip().splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 4:
                gpus.append({"name": parts[0], "memory": parts[1], "driver": parts[2], "compute_cap": parts[3]})
    return gpus


def capture(threads: int, device: str) -> dict[str, Any]:
    return {
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_flags": cpu_flags(),
        "cores": available_cores(),
        "threads": threads,
        "device": device,
        "gpus": gpu_info() if device == "cuda" else [],
        "versions": versions(),
        "git": git_commit(),
        "env": {k: os.environ[k] for k in sorted(os.environ) if k.startswith(("MALLOC_", "OMP_", "KMP_", "GOMP_"))},
    }
