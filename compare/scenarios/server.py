"""--scenario server (MLPerf LoadGen's Server): after the cell's usual timing, Poisson
arrivals find the highest QPS whose p99 stays within --server-p99-ms, for the backend and
for eager in the same worker (compare.measure.loadgen; needs dlcompare[loadgen]). Its
options are the run's ``scenario_options`` (ServerConfig's fields).

The cell's first process runs the search and records it as ``cell.scenario.server``; the report
shows each cell's highest QPS within the bound beside eager's, with LoadGen's p99 and
dlcompare's own at that QPS, and the header states the bound and the runs."""
from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from compare.measure.loadgen import BOUND_FACTOR, MAX_RUN_FACTOR, MIN_BOUND_MS, ServerConfig
from compare.results.protocol import CellSpec
from compare.results.roles import REFERENCE_SIDE
from compare.results.schema import Cell, RunResults
from compare.scenarios.base import ReportSection, RunOptions, Scenario

# --server-* flag (argparse's dest) -> ServerConfig field
SERVER_FLAGS = {"server_p99_ms": "p99_ms", "server_run_ms": "run_ms", "server_runs": "runs"}
SERVER_NOTE = ("Server (MLPerf LoadGen's Server scenario, PerformanceOnly): Poisson arrivals at a target QPS, "
               "queued and served one at a time by the compiled call; latency from each query's scheduled "
               "arrival to its completion. max QPS: the highest target QPS whose LoadGen p99 met the bound, found "
               "by bisection over (0, 1/back-to-back median]; eager is searched in the same worker, its runs "
               "alternated with the backend's, under the same bound. 'own p99' is dlcompare's from the issue "
               "callback to completion in the same run. 'VALID runs' counts runs LoadGen called VALID (its "
               "early-stopping rule needs a few hundred queries, so short runs can meet the bound and still be "
               "INVALID).")


class Server(Scenario):
    name = "server"
    rank = 40
    help = ("after timing, MLPerf LoadGen's Server scenario (Poisson arrivals) finds the highest QPS whose p99 "
            "stays within --server-p99-ms, for the backend and eager (needs dlcompare[loadgen])")

    def add_options(self, options: RunOptions) -> None:
        options.add("--server-p99-ms", type=options.positive_float, default=None, metavar="MS",
                    help=f"--scenario server: the p99 bound every side of a cell is held to (default "
                         f"{BOUND_FACTOR:g}x eager's back-to-back median in the cell, at least {MIN_BOUND_MS:g} ms)")
        options.add("--server-run-ms", type=options.positive_int, default=None, metavar="MS",
                    help=f"--scenario server: LoadGen's minimum duration of each run (default {ServerConfig.run_ms})")
        options.add("--server-runs", type=options.positive_int, default=None, metavar="N",
                    help=f"--scenario server: LoadGen runs per side, the QPS bisection's steps "
                         f"(default {ServerConfig.runs})")

    def option_values(self, args: argparse.Namespace, chosen: bool) -> dict[str, Any]:
        """ServerConfig's fields, defaults filled in; a --server-* flag without --scenario
        server is a usage error, not a flag quietly ignored."""
        given = {field: getattr(args, flag) for flag, field in SERVER_FLAGS.items()
                 if getattr(args, flag, None) is not None}
        if not chosen:
            if given:
                flag = next(flag for flag, field in SERVER_FLAGS.items() if field in given)
                raise ValueError(f"--{flag.replace('_', '-')} applies to --scenario server only")
            return {}
        return asdict(ServerConfig(**given))

    def before_torch(self, spec: CellSpec) -> None:
        # a missing LoadGen costs nothing to find before torch loads
        require_loadgen()

    def after_timing(self, compiled: Any, prepared: Any, setup: Any, spec: CellSpec, timed: dict[str, Any],
                     emit: Callable[..., None]) -> dict[str, Any]:
        return {"server": serve_under_loadgen(compiled, prepared, setup, spec, timed, emit)}

    def csv_columns(self, cell: Cell) -> dict[str, Any]:
        return server_columns(cell.scenario.server) if cell.scenario.server is not None else {}

    def header(self, config: dict[str, Any]) -> str:
        return self.name + server_conditions(config)

    def sections(self, results: RunResults) -> list[ReportSection]:
        versions = sorted({str(c.scenario.server.get("loadgen_version")) for c in results.cells if c.scenario.server})
        return [ReportSection("Server (LoadGen)", server_rows(results), SERVER_NOTE + f" LoadGen {', '.join(versions)}.",
                              rich_title="server (LoadGen): highest QPS within the p99 bound")]


# The worker


def require_loadgen() -> None:
    """Without LoadGen installed the cell is unavailable with the install hint, before
    anything is built or compiled."""
    from adapters import BackendUnavailable
    from compare.measure.loadgen import LoadgenMissing, loadgen_module

    try:
        loadgen_module()
    except LoadgenMissing as exc:
        raise BackendUnavailable(str(exc)) from None


def serve_under_loadgen(compiled, prepared, setup: Any, spec: CellSpec, timed: dict[str, Any],
                        emit: Callable[..., None]) -> dict[str, Any] | None:
    """The cell's first process: LoadGen's Server scenario against the compiled call and,
    in the same worker, eager (compare.measure.loadgen), after timing. Each side's search
    starts from its back-to-back median just timed."""
    if spec.process_index != 0:  # the cell keeps its first process's search
        return None
    from adapters.eager import TorchCompiled
    from compare.measure.loadgen import Served, measure_server

    def served(name: str, run, arg, sync, median_ms: float) -> Served:
        def call() -> None:
            run(arg)
            sync()
        return Served(name, call, median_ms)

    emit(phase="server")
    eager_ms = timed["eager_latency"].median
    sides = [served(spec.backend if spec.is_reference else "backend", compiled.run, prepared,
                    compiled.synchronize, timed["latency"].median)]
    if not spec.is_reference:
        eager = TorchCompiled(setup.reference_model, spec.device)
        sides.append(served(REFERENCE_SIDE, eager.run, eager.prepare(setup.inputs), eager.synchronize, eager_ms))
    out_dir = Path(spec.work_dir or ".") / "loadgen"
    return measure_server(sides, eager_ms, ServerConfig(**spec.scenario_options), out_dir,
                          on_run=lambda side, run: emit(phase=f"server {side} {run['target_qps']:.4g} qps"))


# The records and the reports


def server_columns(server: dict[str, Any]) -> dict[str, Any]:
    """--scenario server's CSV columns: the bound, each side's highest QPS within it and the
    p99 there (LoadGen's and dlcompare's own), their ratio, and the LoadGen runs made."""
    eager = server.get(REFERENCE_SIDE) or {}
    return {"server_p99_bound_ms": server.get("p99_bound_ms"), "server_max_qps": server.get("max_qps"),
            "server_p99_at_max_ms": server.get("p99_at_max_ms"),
            "server_own_p99_at_max_ms": server.get("own_p99_at_max_ms"),
            "server_eager_max_qps": eager.get("max_qps"), "server_eager_p99_at_max_ms": eager.get("p99_at_max_ms"),
            "server_qps_ratio_vs_eager": server.get("qps_ratio_vs_eager"),
            "server_loadgen_runs": len(server.get("loadgen_runs") or []) + len(eager.get("loadgen_runs") or [])}


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
    server = config.get("scenario_options")
    if config.get("scenario") != "server" or not server:
        return ""
    bound = (f"p99 within {server['p99_ms']:g} ms" if server.get("p99_ms") is not None else
             f"p99 within {BOUND_FACTOR:g}x eager's median (at least {MIN_BOUND_MS:g} ms)")
    return (f" (MLPerf LoadGen Server: {bound}; up to {server['runs']} runs per side of at least "
            f"{server['run_ms'] / 1e3:g} s and {server['min_queries']} queries, at most "
            f"{MAX_RUN_FACTOR * server['run_ms'] / 1e3:g} s)")
