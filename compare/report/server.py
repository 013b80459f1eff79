"""The server (LoadGen) table and the scenario's parameters in the header (read-only, from
results): each cell's highest QPS whose p99 met the bound, beside eager's in the same
worker, with LoadGen's p99 and dlcompare's own at that QPS."""
from __future__ import annotations

from typing import Any

import pandas as pd

from compare.results.roles import REFERENCE_SIDE
from compare.results.schema import RunResults

SERVER_NOTE = ("Server (MLPerf LoadGen's Server scenario, PerformanceOnly): Poisson arrivals at a target QPS, "
               "queued and served one at a time by the compiled call; latency from each query's scheduled "
               "arrival to its completion. max QPS: the highest target QPS whose LoadGen p99 met the bound, found "
               "by bisection over (0, 1/back-to-back median]; eager is searched in the same worker, its runs "
               "alternated with the backend's, under the same bound. 'own p99' is dlcompare's from the issue "
               "callback to completion in the same run. 'VALID runs' counts runs LoadGen called VALID (its "
               "early-stopping rule needs a few hundred queries, so short runs can meet the bound and still be "
               "INVALID).")


def _num(value: float | None, fmt: str = "{:.4g}") -> str:
    return "-" if value is None else fmt.format(value)


def _valid(runs: list[dict[str, Any]]) -> str:
    return f"{sum(r.get('result') == 'VALID' for r in runs)}/{len(runs)}"


def server_rows(results: RunResults) -> list[dict[str, Any]]:
    """One row per cell with a server record (a cell that could not run it says why in the main table)."""
    rows = []
    for cell in results.cells:
        server = cell.scenario.server
        if server is None:
            continue
        eager = server.get(REFERENCE_SIDE) or {}
        rows.append({"workload": cell.label, "backend": cell.backend,
                     "p99 bound ms": _num(server.get("p99_bound_ms")),
                     "max QPS": _num(server.get("max_qps"), "{:.1f}"),
                     "p99 at max ms (LoadGen)": _num(server.get("p99_at_max_ms")),
                     "own p99 at max ms": _num(server.get("own_p99_at_max_ms")),
                     "eager max QPS": _num(eager.get("max_qps"), "{:.1f}") if eager else "-",
                     "QPS vs eager": _num(server.get("qps_ratio_vs_eager"), "{:.2f}x"),
                     "VALID runs": _valid(list(server.get("loadgen_runs") or []) + list(eager.get("loadgen_runs") or []))})
    return rows


def server_conditions(config: dict[str, Any]) -> str:
    """The scenario's parameters for the header's conditions ('' when not a server run)."""
    server = config.get("server")
    if config.get("scenario") != "server" or not server:
        return ""
    from compare.measure.loadgen import BOUND_FACTOR, MAX_RUN_FACTOR, MIN_BOUND_MS

    bound = (f"p99 within {server['p99_ms']:g} ms" if server.get("p99_ms") is not None else
             f"p99 within {BOUND_FACTOR:g}x eager's median (at least {MIN_BOUND_MS:g} ms)")
    return (f" (MLPerf LoadGen Server: {bound}; up to {server['runs']} runs per side of at least "
            f"{server['run_ms'] / 1e3:g} s and {server['min_queries']} queries, at most "
            f"{MAX_RUN_FACTOR * server['run_ms'] / 1e3:g} s)")


def server_markdown(results: RunResults) -> list[str]:
    """The '## Server (LoadGen)' section of summary.md, or nothing."""
    rows = server_rows(results)
    if not rows:
        return []
    versions = sorted({str(c.scenario.server.get("loadgen_version")) for c in results.cells if c.scenario.server})
    return ["", "## Server (LoadGen)", "", pd.DataFrame(rows).to_markdown(index=False), "",
            SERVER_NOTE + f" LoadGen {', '.join(versions)}."]
