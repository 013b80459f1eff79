"""Run history in an embedded SQLite database (``reports/history.sqlite``).

Every run is recorded (run id, time, environment, per-cell figures) in one
transaction per write, in WAL mode, so a process killed mid-write leaves the
database readable with every earlier run intact. History is a convenience:
failing to write it never touches a run's own files.
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from compare.results.schema import RunResults

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, started TEXT, finished TEXT, state TEXT,
    path TEXT, cpu_model TEXT, threads INTEGER, device TEXT,
    environment TEXT, config TEXT
);
CREATE TABLE IF NOT EXISTS cells (
    run_id TEXT, workload TEXT, backend TEXT, size TEXT, device TEXT, status TEXT,
    latency_ms REAL, eager_latency_ms REAL, speedup REAL, compile_s REAL,
    max_abs_err REAL, numerics_ok INTEGER, peak_rss_mb REAL, cache TEXT, error TEXT, wall_s REAL,
    PRIMARY KEY (run_id, workload, backend, size, device)
);
CREATE INDEX IF NOT EXISTS cells_by_pair ON cells (workload, backend);
"""


def connect(path: str | Path) -> sqlite3.Connection:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(str(path), timeout=30)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.executescript(SCHEMA)
    if "wall_s" not in {row[1] for row in con.execute("PRAGMA table_info(cells)")}:
        con.execute("ALTER TABLE cells ADD COLUMN wall_s REAL")  # a database from before wall times were kept
    return con


def _float(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def record_run(db_path: str | Path, results: RunResults, run_dir: str | Path) -> None:
    """Insert or replace one run and its cells atomically."""
    env = results.environment
    con = connect(db_path)
    try:
        with con:  # one transaction: all of this run, or none of it
            con.execute(
                "INSERT OR REPLACE INTO runs VALUES (?,?,?,?,?,?,?,?,?,?)",
                (results.run_id, results.started, results.finished, results.state, str(Path(run_dir).resolve()),
                 env.get("cpu_model"), env.get("threads"), env.get("device"),
                 json.dumps(env), json.dumps(results.config)),
            )
            con.execute("DELETE FROM cells WHERE run_id = ?", (results.run_id,))
            con.executemany(
                "INSERT INTO cells (run_id, workload, backend, size, device, status, latency_ms, eager_latency_ms, "
                "speedup, compile_s, max_abs_err, numerics_ok, peak_rss_mb, cache, error, wall_s) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [(results.run_id, c.label, c.backend, c.size, c.device, c.status,
                  c.latency.median if c.latency else None, _float(c.eager_median_ms), _float(c.speedup),
                  _float(c.compile_s), _float(c.numerics.max_abs_err),
                  None if c.numerics.numerics_ok is None else int(c.numerics.numerics_ok),
                  _float(c.memory.peak_rss_mb), c.costs.cache, c.error,
                  _float(run_wall_s(c)))
                 for c in results.cells],
            )
    finally:
        con.close()


def list_runs(db_path: str | Path) -> list[dict[str, Any]]:
    con = connect(db_path)
    try:
        rows = con.execute(
            "SELECT r.run_id, r.started, r.state, r.cpu_model, r.threads, r.path, "
            "COUNT(c.workload), SUM(c.status = 'ok') FROM runs r LEFT JOIN cells c USING (run_id) "
            "GROUP BY r.run_id ORDER BY r.started").fetchall()
    finally:
        con.close()
    keys = ("run_id", "started", "state", "cpu_model", "threads", "path", "cells", "ok")
    return [dict(zip(keys, r)) for r in rows]


CellKey = tuple[str, str, str, str]  # (label, backend, size, device)


def run_wall_s(cell) -> float | None:
    """What the run's wall spent on the cell: its processes' shares of their interleaved
    stretches where each has one (compare.harness.pooling.stretch_shares), else its walls."""
    shares = [p.get("share_s") for p in cell.spread.processes or []]
    return sum(shares) if shares and all(s is not None for s in shares) else cell.conditions.wall_s


def past_wall_s(db_path: str | Path, cpu_model: str, threads: int, coverage_only: bool = False) -> dict[CellKey, float]:
    """The latest wall time of each cell that finished ok in a run on this CPU and thread count
    (a run's estimate, compare.harness.estimate), in timed runs or in --coverage-only ones
    (``coverage_only``: an untimed cell takes its compile alone). Read-only: no database is
    made or migrated."""
    if not Path(db_path).is_file():
        return {}
    try:
        con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5)
        try:
            rows = con.execute(
                "SELECT c.workload, c.backend, c.size, c.device, c.wall_s FROM cells c JOIN runs r USING (run_id) "
                "WHERE r.cpu_model = ? AND r.threads = ? AND c.status = 'ok' AND c.wall_s > 0 "
                "AND coalesce(json_extract(r.config, '$.coverage_only'), 0) = ? ORDER BY r.started",
                (cpu_model, threads, int(coverage_only))).fetchall()
        finally:
            con.close()
    except sqlite3.Error:  # an old database without wall times, or a locked one: no basis
        return {}
    return {(w, b, s, d): wall for w, b, s, d, wall in rows}


def series(db_path: str | Path, workload: str, backend: str) -> list[dict[str, Any]]:
    con = connect(db_path)
    try:
        rows = con.execute(
            "SELECT r.run_id, r.started, c.size, c.status, c.latency_ms, c.speedup, c.compile_s, c.max_abs_err "
            "FROM cells c JOIN runs r USING (run_id) WHERE c.workload = ? AND c.backend = ? ORDER BY r.started",
            (workload, backend)).fetchall()
    finally:
        con.close()
    keys = ("run_id", "started", "size", "status", "latency_ms", "speedup", "compile_s", "max_abs_err")
    return [dict(zip(keys, r)) for r in rows]


def run(args, console) -> int:
    from rich.table import Table

    db = Path(args.db)
    if not db.exists():
        console.print(f"no history yet at {db}")
        return 0
    if args.workload or args.backend:
        if not (args.workload and args.backend):
            raise ValueError("history needs both --workload and --backend to show a figure over time")
        rows = series(db, args.workload, args.backend)
        table = Table(title=f"{args.workload} / {args.backend} over time")
        for col in ("run", "started", "size", "status", "latency ms", "speedup", "compile s", "max abs err"):
            table.add_column(col)
        for r in rows:
            table.add_row(r["run_id"], r["started"], r["size"], r["status"],
                          *[("-" if r[k] is None else f"{r[k]:.4g}") for k in ("latency_ms", "speedup", "compile_s", "max_abs_err")])
        console.print(table)
        return 0
    table = Table(title=f"runs in {db}")
    for col in ("run", "started", "state", "cpu", "threads", "cells ok", "path"):
        table.add_column(col, overflow="fold")
    for r in list_runs(db):
        table.add_row(r["run_id"], r["started"], r["state"], r["cpu_model"], str(r["threads"]),
                      f"{r['ok']}/{r['cells']}", r["path"])
    console.print(table)
    return 0
