"""``python -m compare tuning-logs``: list, show, prune, export and import TVM's tuning logs.
The TVM backends bring this subcommand (``Backend.subcommand``)."""
from __future__ import annotations

import datetime as _dt
import json
import shutil
import tarfile
import tempfile
from pathlib import Path

from adapters.base import CommandUsage
from adapters.tvm.log_store import META_FILE, RECORD_FILE, WORKLOAD_FILE, TuningLogError, TuningLogStore, list_logs, read_records

LOG_FILES = (WORKLOAD_FILE, RECORD_FILE, META_FILE)


NAME = "tuning-logs"
ALIASES = ("tvm-logs",)  # the name issue 58 asked for; both run this command
TuningLogsUsage = CommandUsage


def add_parser(sub) -> None:
    tl = sub.add_parser(NAME, aliases=list(ALIASES), help="list, show, prune, export or import stored TVM tuning logs")
    tl.add_argument("--tuning-logs", default="tuning_logs", metavar="DIR")
    actions = tl.add_subparsers(dest="action")
    actions.add_parser("list", help="every stored log (the default)")
    show = actions.add_parser("show", help="one log: metadata and per-task tuning history")
    show.add_argument("key", help="TARGET/WORKLOAD as printed by list")
    prune = actions.add_parser("prune", help="delete logs by age or target")
    prune.add_argument("--older-than", type=float, metavar="DAYS")
    prune.add_argument("--target", help="delete logs whose target key contains this text")
    prune.add_argument("--dry-run", action="store_true")
    exp = actions.add_parser("export", help="pack logs into a .tar.gz for another machine of the same target")
    exp.add_argument("file")
    exp.add_argument("--target", help="only target keys containing this text")
    imp = actions.add_parser("import", help="unpack logs exported elsewhere (validated before use)")
    imp.add_argument("file")


def run(args, console) -> int:
    root = Path(args.tuning_logs)
    action = args.action or "list"
    if action == "list":
        return _list(root, console)
    if action == "show":
        return _show(root, args.key, console)
    if action == "prune":
        return _prune(root, args, console)
    if action == "export":
        return _export(root, Path(args.file), args.target, console)
    return _import(root, Path(args.file), console)


def _list(root: Path, console) -> int:
    from rich.table import Table

    rows = list_logs(root)
    if not rows:
        console.print(f"no tuning logs under {root / 'tvm'}")
        return 0
    table = Table(title=f"TVM tuning logs in {root}")
    for col in ("target", "workload", "trials", "budget", "tuning s", "tasks", "from other models", "best ms per task",
                "size", "updated", "status"):
        table.add_column(col, overflow="fold")
    for r in rows:
        tuning_s = "unknown" if r.get("tuning_s") is None else f"{r['tuning_s']:.0f}"
        shared = f"{r['tasks_from_store']} ({', '.join(r['from_store'])})" if r["tasks_from_store"] else "-"
        table.add_row(r["target"], r["workload"], str(r["trials"]), str(r["budget"]), tuning_s, str(r["tasks"]), shared,
                      ", ".join(f"{v:.4g}" for v in r["best_ms_per_task"]), f"{r['bytes'] / 1024:.0f} KiB",
                      str(r["updated"]), r["status"])
    console.print(table)
    return 0


def _find(root: Path, key: str) -> Path:
    folder = root / "tvm" / key
    if ".." in Path(key).parts or not (folder / META_FILE).is_file():
        raise TuningLogsUsage(f"no tuning log {key!r} under {root / 'tvm'} (see: tuning-logs list)")
    return folder


def _show(root: Path, key: str, console) -> int:
    folder = _find(root, key)
    meta = json.loads((folder / META_FILE).read_text())
    store = TuningLogStore(folder, meta.get("target_key", ""), meta.get("workload_key", ""))
    try:
        history = store.history()
    except TuningLogError as exc:
        raise TuningLogsUsage(f"{key}: {exc}") from None
    console.print_json(json.dumps(meta))
    names = meta.get("task_names", [])
    for shared in meta.get("tasks_from_store") or []:
        console.print(f"{shared['task']}: from {shared['from']}'s log ({shared['log']}), best {shared['best_ms']:.4g} ms")
    for task in history:
        runs = [r for r in task["run_ms"] if r is not None]
        label = names[task["task"]] if task["task"] < len(names) else f"task {task['task']}"
        best = f"{task['best_ms']:.4g} ms" if task["best_ms"] is not None else "no valid run"
        console.print(f"{label}: {task['trials']} trials, best {best}, {len(task['run_ms']) - len(runs)} failed")
    return 0


def _prune(root: Path, args, console) -> int:
    if args.older_than is None and not args.target:
        raise TuningLogsUsage("prune needs --older-than DAYS and/or --target TEXT")
    now = _dt.datetime.now(_dt.timezone.utc)
    removed = 0
    for row in list_logs(root):
        old = False
        if args.older_than is not None and row["updated"]:
            age = now - _dt.datetime.fromisoformat(row["updated"])
            old = age.total_seconds() > args.older_than * 86400
        matches_target = bool(args.target) and args.target in row["target"]
        if (args.older_than is None or old) and (not args.target or matches_target):
            console.print(f"{'would remove' if args.dry_run else 'removing'} {row['key']}")
            if not args.dry_run:
                with TuningLogStore(Path(row["path"]), "", "").lock():
                    for name in LOG_FILES:
                        (Path(row["path"]) / name).unlink(missing_ok=True)
            removed += 1
    console.print(f"{removed} log(s) {'matched' if args.dry_run else 'removed'}")
    return 0


def _export(root: Path, file: Path, target: str | None, console) -> int:
    rows = [r for r in list_logs(root) if r["status"] == "ok" and (not target or target in r["target"])]
    if not rows:
        raise TuningLogsUsage(f"no valid tuning logs to export under {root / 'tvm'}")
    tmp = file.with_name(f".{file.name}.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for r in rows:
            for name in LOG_FILES:
                path = Path(r["path"]) / name
                if path.exists():
                    tar.add(path, arcname=f"tvm/{r['key']}/{name}")
    tmp.replace(file)
    console.print(f"exported {len(rows)} log(s) to {file}")
    return 0


def _import(root: Path, file: Path, console) -> int:
    if not file.is_file():
        raise TuningLogsUsage(f"{file}: no such file")
    imported, refused = 0, []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            with tarfile.open(file, "r:gz") as tar:
                members = [m for m in tar.getmembers() if m.isfile() and Path(m.name).name in LOG_FILES
                           and len(Path(m.name).parts) == 4 and Path(m.name).parts[0] == "tvm"
                           and ".." not in Path(m.name).parts]
                tar.extractall(tmp, members=members, filter="data")
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise TuningLogsUsage(f"{file}: not a readable tuning-log archive ({exc})") from None
        for meta_path in sorted(Path(tmp).glob(f"tvm/*/*/{META_FILE}")):
            folder = meta_path.parent
            key = f"{folder.parent.name}/{folder.name}"
            try:
                meta = json.loads(meta_path.read_text())
                read_records(folder)
                if meta.get("target_key") != folder.parent.name:
                    raise TuningLogError("metadata names another target than its folder")
            except (TuningLogError, json.JSONDecodeError) as exc:
                refused.append(f"{key}: {exc}")
                continue
            dest = root / "tvm" / key
            dest.mkdir(parents=True, exist_ok=True)
            with TuningLogStore(dest, "", "").lock():
                for name in LOG_FILES:
                    if (folder / name).exists():
                        shutil.copy2(folder / name, dest / f".{name}.import")
                        (dest / f".{name}.import").replace(dest / name)
            imported += 1
    for line in refused:
        console.print(f"refused {line}")
    console.print(f"imported {imported} log(s) into {root / 'tvm'}; they are used only on a machine whose "
                  "target key (CPU, cores, TVM version) matches")
    return 0 if not refused else 1
