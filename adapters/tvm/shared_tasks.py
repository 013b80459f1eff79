"""Tuned tasks shared across models (issue 58). The tuning store of a target is the folder
``<tuning logs>/tvm/<target key>/``: one MetaSchedule log per model under it. Before a model
is tuned for the first time, each of its tasks whose kernel another model's log already
holds (the same PrimFunc, by MetaSchedule's own structural hash and equality: bert_base's
and distilbert's GEMMs of one shape are one task) takes that log's best record into the
model's log and is not tuned again. Only logs whose metadata names this target key are
read: another target's records (another CPU, ISA, thread count or TVM release) are never
used. Each reused task says where it came from and what its log's tuning cost per task,
so that the break-even counts that tuning once, where it was produced.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .log_store import META_FILE, META_VERSION, TuningLogError, read_records, run_secs_ms


def store_logs(target_dir: Path, own: Path, target_key: str) -> list[tuple[Path, dict[str, Any]]]:
    """The other models' logs in this target's store that are whole and made for this
    target, with their metadata. Read only: a damaged or foreign log is left to its own
    model's next run, which sets it aside."""
    logs = []
    if not target_dir.is_dir():
        return logs
    for folder in sorted(p for p in target_dir.iterdir() if p.is_dir() and p != own and not p.name.startswith(".")):
        try:
            meta = json.loads((folder / META_FILE).read_text())
            read_records(folder)
        except (OSError, ValueError, TuningLogError):
            continue
        if isinstance(meta, dict) and meta.get("meta_version") == META_VERSION and meta.get("target_key") == target_key:
            logs.append((folder, meta))
    return logs


def per_task_tuning_s(meta: dict[str, Any]) -> float | None:
    """A log's tuning seconds spread evenly over its tasks (None where it did not record them)."""
    seconds, tasks = meta.get("tuning_s"), meta.get("tasks")
    return round(float(seconds) / int(tasks), 1) if seconds and tasks else None


def replays(trace: Any, mod: Any) -> bool:
    """Whether a stored schedule applies to this model's kernel. MetaSchedule's structural
    match does not compare block names, and a trace finds its blocks by name: distilbert's
    kernels matched bert_base's, and the copied traces then failed to load in the tuner's own
    database ("parallel_for_dynamic error"). A trace that does not replay is not copied."""
    from tvm import s_tir

    try:
        trace.apply_to_schedule(s_tir.Schedule(mod), remove_postproc=False)
    except Exception:  # noqa: BLE001 - any failure to replay means: tune it here
        return False
    return True


def reuse_stored_tasks(tasks: list, target: Any, target_dir: Path, own: Path, target_key: str,
                       scratch: Path) -> list[dict[str, Any]]:
    """Copy into the scratch database (the model's log to be) the best stored record of
    every task that another model's log on this target holds; returns one entry per task
    reused: its name, the model and log it came from, its kernel's measured ms and that
    log's tuning seconds per task."""
    from tvm.s_tir import meta_schedule as ms

    sources = [(folder, meta, ms.database.JSONDatabase(work_dir=str(folder), allow_missing=False))
               for folder, meta in store_logs(target_dir, own, target_key)]
    if not sources:
        return []
    scratch.mkdir(parents=True, exist_ok=True)
    into = ms.database.JSONDatabase(work_dir=str(scratch))
    reused = []
    for task in tasks:
        mod = task.dispatched[0]
        best = None
        for folder, meta, database in sources:
            record = database.query_tuning_record(mod, target, task.task_name) if database.has_workload(mod) else None
            run_ms = None if record is None else run_secs_ms(record.run_secs)
            if run_ms is not None and (best is None or run_ms < best[0]) and replays(record.trace, mod):
                best = (run_ms, record, folder, meta)
        if best is None:
            continue
        run_ms, record, folder, meta = best
        into.commit_tuning_record(ms.database.TuningRecord(
            record.trace, into.commit_workload(mod), record.run_secs, record.target, record.args_info))
        reused.append({"task": task.task_name, "from": meta.get("workload") or folder.name, "log": folder.name,
                       "best_ms": round(run_ms, 6), "tuning_s_per_task": per_task_tuning_s(meta)})
    return reused
