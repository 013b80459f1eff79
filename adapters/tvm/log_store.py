"""Persistent MetaSchedule tuning logs: keyed, locked, validated, swapped atomically.

Layout: ``<root>/tvm/<target key>/<workload key>/`` holding MetaSchedule's own
``database_workload.json`` and ``database_tuning_record.json`` plus our
``dlcompare-tuning.json`` (what was tuned, for which target, with what budget).

TVM's own lookup ignores the target, so a log is used only when our metadata
names the same target key; anything else (a copied log from another machine or
TVM version, a truncated file) is moved aside with a warning and re-tuned.
This module reads JSON only (never pickle) and does not import TVM.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from compare.results.files import atomic_write_text

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
META_FILE = "dlcompare-tuning.json"
LOCK_FILE = ".lock"
META_VERSION = 1


class TuningLogError(ValueError):
    pass


@dataclass
class LogState:
    """What a tuning-log folder holds, after validation."""

    usable: bool
    meta: dict[str, Any] = field(default_factory=dict)
    records: int = 0
    workloads: int = 0
    warning: str | None = None


def read_records(folder: Path) -> tuple[list[Any], list[Any]]:
    """Parse both database files line by line; raise TuningLogError on any damage."""
    parsed = []
    for name in (WORKLOAD_FILE, RECORD_FILE):
        path = folder / name
        rows = []
        if path.exists():
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                raise TuningLogError(f"{path.name} is not text (binary garbage)") from None
            for lineno, line in enumerate(text.splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    raise TuningLogError(f"{path.name} line {lineno} is not valid JSON (truncated or edited)") from None
        parsed.append(rows)
    workloads, records = parsed
    for i, rec in enumerate(records, start=1):
        if not (isinstance(rec, list) and len(rec) == 2 and isinstance(rec[0], int) and isinstance(rec[1], list)):
            raise TuningLogError(f"{RECORD_FILE} record {i} does not have MetaSchedule's shape")
        if not 0 <= rec[0] < len(workloads):
            raise TuningLogError(f"{RECORD_FILE} record {i} points at workload {rec[0]}, the log has {len(workloads)}")
    return workloads, records


def record_run_ms(record: list[Any]) -> float | None:
    """Mean measured run time of one tuning record in ms (None for a failed build/run)."""
    try:
        return run_secs_ms(record[1][1])
    except (IndexError, TypeError):
        return None


def run_secs_ms(run_secs: Any) -> float | None:
    """A record's measured seconds as their mean in ms (None for a failed build/run)."""
    try:
        values = [float(v) for v in run_secs]
    except (TypeError, ValueError):
        return None
    if not values or min(values) >= 1e9:  # MetaSchedule's marker for a failed measurement
        return None
    return sum(values) / len(values) * 1e3


class TuningLogStore:
    def __init__(self, folder: str | Path, target_key: str, workload_key: str):
        self.folder = Path(folder)
        self.target_key = target_key
        self.workload_key = workload_key

    def lock(self) -> FileLock:
        """Exclusive lock across processes: two runs never tune or swap one log at once."""
        self.folder.mkdir(parents=True, exist_ok=True)
        return FileLock(self.folder / LOCK_FILE)

    def inspect(self) -> LogState:
        """Validate what is stored; foreign or damaged logs are moved aside, never used."""
        has_files = any((self.folder / n).exists() for n in (WORKLOAD_FILE, RECORD_FILE))
        if not has_files:
            return LogState(usable=False)
        meta_path = self.folder / META_FILE
        try:
            meta = json.loads(meta_path.read_text())
        except FileNotFoundError:
            return self._set_aside("tuning log has no dlcompare metadata (unknown target)")
        except (ValueError, OSError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            return self._set_aside("tuning log metadata is unreadable")
        if not isinstance(meta, dict) or meta.get("meta_version") != META_VERSION:
            return self._set_aside("tuning log metadata has an unknown version")
        if meta.get("target_key") != self.target_key:
            return self._set_aside(f"tuning log was made for target {meta.get('target_key')!r}, not this one")
        try:
            workloads, records = read_records(self.folder)
        except TuningLogError as exc:
            return self._set_aside(f"tuning log is corrupt: {exc}")
        return LogState(usable=True, meta=meta, records=len(records), workloads=len(workloads))

    def _set_aside(self, reason: str) -> LogState:
        stamp = _dt.datetime.now().strftime("%Y%m%dT%H%M%S")
        aside = self.folder.parent / f".{self.folder.name}.set-aside-{stamp}-{os.getpid()}"
        aside.mkdir(parents=True, exist_ok=True)
        for name in (WORKLOAD_FILE, RECORD_FILE, META_FILE):
            if (self.folder / name).exists():
                os.replace(self.folder / name, aside / name)
        return LogState(usable=False, warning=f"{reason}; moved to {aside.name} and re-tuning")

    def clear(self) -> None:
        for name in (WORKLOAD_FILE, RECORD_FILE, META_FILE):
            with contextlib.suppress(FileNotFoundError):
                (self.folder / name).unlink()

    def copy_into(self, scratch: Path) -> None:
        scratch.mkdir(parents=True, exist_ok=True)
        for name in (WORKLOAD_FILE, RECORD_FILE):
            if (self.folder / name).exists():
                shutil.copy2(self.folder / name, scratch / name)

    def commit(self, scratch: Path, meta: dict[str, Any]) -> None:
        """Swap the tuned database in: each file is replaced by rename, the metadata
        last, so a crash mid-commit leaves either the old log or a log without
        metadata (which the next run sets aside), never a mixed one."""
        read_records(scratch)  # refuse to store what we could not read back
        self.folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            (self.folder / META_FILE).unlink()
        for name in (WORKLOAD_FILE, RECORD_FILE):
            src = scratch / name
            if src.exists():
                tmp = self.folder / f".{name}.tmp-{os.getpid()}"
                shutil.copy2(src, tmp)
                os.replace(tmp, self.folder / name)
        full = {"meta_version": META_VERSION, "target_key": self.target_key, "workload_key": self.workload_key,
                "updated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), **meta}
        atomic_write_text(self.folder / META_FILE, json.dumps(full, indent=2))

    def history(self) -> list[dict[str, Any]]:
        """Per task (MetaSchedule workload): measured ms per trial, in order, and the best."""
        workloads, records = read_records(self.folder)
        per_task: dict[int, list[float | None]] = {}
        for rec in records:
            per_task.setdefault(rec[0], []).append(record_run_ms(rec))
        out = []
        for idx in sorted(per_task):
            runs = per_task[idx]
            ok = [r for r in runs if r is not None]
            out.append({"task": idx, "trials": len(runs), "best_ms": min(ok) if ok else None,
                        "run_ms": [None if r is None else round(r, 6) for r in runs]})
        return out


def list_logs(root: str | Path, backend: str = "tvm") -> list[dict[str, Any]]:
    """Every stored tuning log with its metadata, size and date (for `compare tuning-logs`)."""
    base = Path(root) / backend
    rows = []
    if not base.is_dir():
        return rows
    for meta_path in sorted(base.glob(f"*/*/{META_FILE}")):
        folder = meta_path.parent
        try:
            meta = json.loads(meta_path.read_text())
            _, records = read_records(folder)
            status = "ok"
        except (TuningLogError, ValueError, OSError) as exc:
            meta, records, status = {}, [], f"damaged: {exc}"
        best = {}
        for rec in records:
            ms = record_run_ms(rec)
            if ms is not None:
                best[rec[0]] = min(best.get(rec[0], ms), ms)
        size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
        rows.append({
            "key": f"{folder.parent.name}/{folder.name}",
            "target": folder.parent.name,
            "workload": folder.name,
            "trials": len(records),
            "budget": meta.get("trials_budget"),
            "tuning_s": meta.get("tuning_s"),  # wall seconds of the tuning behind the log; None: not recorded
            "tasks": len(best),
            # tasks whose record came from another model's log of this target (issue 58)
            "from_store": sorted({r.get("from", "?") for r in meta.get("tasks_from_store") or []}),
            "tasks_from_store": len(meta.get("tasks_from_store") or []),
            "best_ms_per_task": [round(best[k], 4) for k in sorted(best)],
            "bytes": size,
            "updated": meta.get("updated"),
            "status": status,
            "path": str(folder),
        })
    return rows
