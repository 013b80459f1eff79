"""One worker process, seen from the parent: start it, read its events, send it
commands, and turn however it ended into a cell status.

The worker (``python -m compare.worker SPEC RESULT``) runs in its own process group,
reports ``@@dlcompare {json}`` events on stdout (its other output goes to the cell's
log) and writes its result atomically to RESULT. A crash, a hang or an out-of-memory
kill becomes ``failed``, ``timeout`` or ``out_of_memory`` with a one-line reason.
"""
from __future__ import annotations

import dataclasses
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from compare.results import protocol
from compare.results.protocol import CellMeasurement, CellSpec


class WorkerProcess:
    def __init__(self, spec: CellSpec, log_path: Path, env: dict[str, str],
                 on_phase: Callable[[str], None] | None = None, keep_work_dir: bool = False):
        self.work_dir = Path(tempfile.mkdtemp(prefix=f"dlcompare-{spec.workload}-{spec.backend}-"))
        self.spec = dataclasses.replace(spec, work_dir=str(self.work_dir))
        self.result_path = self.work_dir / "result.json"
        self.log_path = log_path
        self.on_phase = on_phase
        self.keep_work_dir = keep_work_dir
        self.events: queue.Queue = queue.Queue()  # every non-phase event, then None at EOF
        self.last_phase = "start"
        self.phase_s: dict[str, float] = {}  # seconds spent in each phase so far (the clock below)
        self.timed_out_after: float | None = None
        spec_path = self.work_dir / "spec.json"
        spec_path.write_text(self.spec.to_json())
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "a")
        self.start = self._phase_mark = time.perf_counter()
        self.started_at = time.time()  # wall clock: when in the run this process sampled
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "compare.worker", str(spec_path), str(self.result_path)],
            stdout=subprocess.PIPE, stderr=self._log, cwd=self.work_dir, env=env,
            stdin=subprocess.PIPE if spec.interleave else subprocess.DEVNULL,
            start_new_session=True,  # its own process group: killed as one, deaf to our Ctrl-C
            text=True, bufsize=1,
        )
        self._reader = threading.Thread(target=self._read_events, daemon=True)
        self._reader.start()

    def _read_events(self) -> None:
        assert self.proc.stdout is not None  # opened with stdout=PIPE
        try:
            for line in self.proc.stdout:
                event = protocol.decode_event(line)
                if event is None:
                    self._log.write(line)
                    self._log.flush()
                    continue
                if "phase" in event:
                    self._clock_phase()
                    self.last_phase = event["phase"]
                    self._tell_phase(event["phase"])
                else:
                    self.events.put(event)
        finally:
            self.events.put(None)  # whatever happened, whoever waits learns that the worker ended

    def _clock_phase(self) -> None:
        """Add the seconds since the last phase event to the phase that was running."""
        now = time.perf_counter()
        self.phase_s[self.last_phase] = self.phase_s.get(self.last_phase, 0.0) + now - self._phase_mark
        self._phase_mark = now

    def _tell_phase(self, phase: str) -> None:
        if self.on_phase:
            try:
                self.on_phase(phase)
            except Exception:  # a progress display must never stop the reading
                pass

    def next_event(self, timeout_s: float) -> dict[str, Any] | None:
        """The next event, or None when the worker ended or did not speak in time (then it
        is killed and ``collect`` says timeout)."""
        try:
            return self.events.get(timeout=timeout_s)
        except queue.Empty:
            self.kill(timed_out_after=timeout_s)
            return None

    def send(self, command: dict[str, Any]) -> bool:
        """One protocol command (``protocol.rounds_command`` or ``finish_command``)."""
        assert self.proc.stdin is not None  # opened with stdin=PIPE
        try:
            self.proc.stdin.write(protocol.encode_command(command))
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def kill(self, timed_out_after: float | None = None) -> None:
        if timed_out_after is not None and self.proc.poll() is None:
            self.timed_out_after = timed_out_after
        kill_group(self.proc)

    def wait(self, timeout_s: float) -> None:
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill(timed_out_after=timeout_s)

    def collect(self) -> CellMeasurement:
        """How the worker ended: its measurement, or a status; cleans up after it."""
        self._reader.join(timeout=5)
        self.wait(10)  # its stdout closed; reap it, so that its exit status (a signal) is known
        self._log.close()
        cell = _collect(self.proc.returncode, self.timed_out_after, self.result_path, self.log_path,
                        self.last_phase)
        self._clock_phase()
        cell = dataclasses.replace(cell, wall_s=time.perf_counter() - self.start, workload_key=self.spec.workload_key,
                                   started_at=self.started_at, phase_s={k: round(v, 3) for k, v in self.phase_s.items()})
        if not self.keep_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        return cell


def execute_worker(spec: CellSpec, log_path: Path, timeout_s: float, env: dict[str, str],
                   on_phase=None, on_start=None, keep_work_dir: bool = False) -> CellMeasurement:
    """One worker from start to end with a timeout; returns the worker's result or a status
    saying how it ended. Used by the local runner and, unchanged, inside a Ray task."""
    worker = WorkerProcess(spec, log_path, env, on_phase=on_phase, keep_work_dir=keep_work_dir)
    if on_start:
        on_start(worker.proc)
    worker.wait(timeout_s)
    return worker.collect()


def kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _collect(returncode: int | None, timed_out_after: float | None, result_path: Path, log_path: Path,
             last_phase: str) -> CellMeasurement:
    if timed_out_after is not None:
        return protocol.ended("timeout", f"no result within {timed_out_after:g} s (was in phase {last_phase!r})")
    if result_path.exists():
        try:
            text = result_path.read_text()
        except OSError as exc:
            return protocol.ended("failed", f"worker result unreadable: {exc}")
        try:
            return CellMeasurement.from_json(text)
        except json.JSONDecodeError as exc:
            return protocol.ended("failed", f"worker result unreadable: {exc}")
        except (ValueError, TypeError) as exc:  # a field too many or missing, a wrong status
            return protocol.ended("failed", f"worker returned an invalid result: {exc}")
    tail = log_tail(log_path)
    if protocol.looks_out_of_memory(tail):
        return protocol.ended("out_of_memory", f"worker ran out of memory in phase {last_phase!r}: {last_line(tail)}")
    if returncode is not None and returncode < 0:  # killed from outside: a rerun may end otherwise
        sig = signal.Signals(-returncode).name
        hint = " (the kernel's OOM killer, or an external kill)" if sig == "SIGKILL" else ""
        return protocol.ended("failed", f"worker killed by {sig}{hint} in phase {last_phase!r}", transient=True)
    return protocol.ended("failed", f"worker exited with code {returncode} in phase {last_phase!r}: {last_line(tail)}")


def log_tail(path: Path, chars: int = 4000) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - chars))
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"
