"""Memory figures of one cell, read in its worker (Linux /proc; psutil for child processes).

Three figures, each in MB:
- ``load``: what importing the backend's libraries and runtime added to the worker;
- ``compile peak``: the high-water mark of the worker *and its child processes*
  (Inductor's compile workers, TVM's builder and runner pools) through compile and the
  first calls, above the RSS after loading;
- ``steady state``: what stays resident once the compiled callable has warmed up,
  above the RSS after loading, read after handing free heap pages back to the OS so
  that the figure does not depend on the allocator's trim policy.
"""
from __future__ import annotations

import ctypes
import resource
import sys
import threading
from pathlib import Path


def _proc_status_kb(field: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return float(line.split()[1])
    except OSError:
        pass
    return None


def rss_mb() -> float | None:
    kb = _proc_status_kb("VmRSS")
    return kb / 1024 if kb is not None else None


def peak_rss_mb() -> float:
    kb = _proc_status_kb("VmHWM")
    if kb is None:  # not Linux: ru_maxrss (KiB on Linux, bytes on macOS)
        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024 if sys.platform == "darwin" else 1)
    return kb / 1024


def reset_peak_rss() -> bool:
    """Linux lets a process reset its RSS high-water mark (clear_refs = 5)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def trim_heap() -> bool:
    """glibc's malloc_trim(0): return free heap pages to the OS whatever the trim
    threshold says. A no-op for jemalloc/tcmalloc, which keep their own pages."""
    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False


class TreePeak:
    """Peak RSS of this process plus all its descendants while the block runs, sampled
    every ``interval_s`` (children are not covered by VmHWM); also this process's own
    exact VmHWM. Use as a context manager."""

    def __init__(self, interval_s: float = 0.02):
        self.interval_s = interval_s
        self.peak_tree_mb = 0.0
        self.peak_children_mb = 0.0
        self.peak_self_mb = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        import psutil

        me = psutil.Process()
        while True:
            children = 0.0
            try:
                for child in me.children(recursive=True):
                    try:
                        children += child.memory_info().rss / 2**20
                    except psutil.Error:
                        continue
            except psutil.Error:
                pass
            own = rss_mb() or 0.0
            self.peak_children_mb = max(self.peak_children_mb, children)
            self.peak_tree_mb = max(self.peak_tree_mb, own + children)
            if self._stop.wait(self.interval_s):
                return

    def __enter__(self) -> "TreePeak":
        self._reset = reset_peak_rss()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.peak_self_mb = peak_rss_mb()
        # The largest child that ended and was waited for, even if it lived between samples.
        reaped = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        self.peak_children_mb = max(self.peak_children_mb, reaped)
        # Own peak is exact; the tree's is sampled, so neither bounds the other.
        self.peak_tree_mb = max(self.peak_tree_mb, self.peak_self_mb)
