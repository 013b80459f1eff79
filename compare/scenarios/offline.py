"""--scenario offline (MLPerf's Offline): throughput on all the threads, each backend with
its own streams where dlcompare has them (OpenVINO's THROUGHPUT hint, ORT sessions in
parallel), else back to back.

Each sample is one call of a stream pool that issues enough requests to last about
``OFFLINE_SAMPLE_S`` and returns when all completed, so a sample is milliseconds per
inference at full throughput. The cell records what each side's pool ran with
(``info.offline``); its throughput (``cell.scenario.throughput``) is derived from those samples.
A batch sweep (``--batch 1,8,32``) adds each backend's best batch."""
from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import Any

from compare.measure.stats import throughput_interval
from compare.measure.timing import OFFLINE_SAMPLE_S, Timed
from compare.results.derived import interval_block
from compare.results.protocol import CellSpec
from compare.results.roles import REFERENCE_SIDE
from compare.results.schema import Cell, RunResults, variant_label
from compare.scenarios.base import Panels, ReportSection, Scenario, Sides

THROUGHPUT_NOTE = ("Offline (MLPerf's Offline): each sample issues enough requests to last about 0.2 s through the "
                   "backend's own stream pool and ends when all completed; inferences/s = 1000 / the median ms per "
                   "inference (the main table's latency in this scenario), its 95% interval resampled as the "
                   "speedup's. Eager runs back to back on all threads, alternated in the same workers, so "
                   "'x eager' is the throughput ratio. samples/s = inferences/s x the batch. A backend without a "
                   "multi-stream mode in dlcompare runs back to back (streams 1, said in 'how').")
BEST_BATCH_NOTE = ("Best batch: per workload, precision and backend timed offline at several batches (the run's "
                   "--batch list), the batch with the most samples/s (inferences/s x batch, from each batch's own cell), "
                   "i.e. the batch this backend would choose for throughput. 'within 95% CI' names a batch whose "
                   "samples/s interval overlaps the best one's: the two are not told apart by this run.")


class Offline(Scenario):
    name = "offline"
    rank = 30
    help = ("throughput on all the threads, each backend with its own streams where dlcompare has them "
            "(OpenVINO's THROUGHPUT hint, ORT sessions in parallel), else back to back")

    def timing(self, timing: dict[str, Any], args: Any) -> dict[str, Any]:
        # a stream pool's calls, many requests each; each sample's own drain is its warm-up
        return {**timing, "offline": True, "sample_warmup": False}

    def timed_sides(self, sides: Sides, spec: CellSpec) -> tuple[list[Timed], dict[str, Any] | None]:
        timed, settings = [], {}
        for name, (compiled, prepared) in sides.items():
            own = name == "backend" and not spec.is_reference
            call, settings[name] = offline_timed(compiled, prepared, own, spec)
            timed.append(call)
        return timed, settings

    def cell_info(self, recorded: dict[str, Any] | None, batch: int) -> dict[str, Any]:
        # at the workload's batch: samples/s is inferences/s times it
        return {"offline": {"batch": batch, **recorded}} if recorded else {}

    def derive(self, cell: Cell, config: dict[str, Any]) -> None:
        fill_throughput(cell)

    def csv_columns(self, cell: Cell) -> dict[str, Any]:
        return throughput_columns(cell.scenario.throughput)

    def header(self, config: dict[str, Any]) -> str:
        return ("offline (throughput on all the threads: each backend's own streams where dlcompare has them, "
                "else back to back; samples of requests lasting about 0.2 s, alternated with eager's)")

    def sections(self, results: RunResults) -> list[ReportSection]:
        return [ReportSection("Throughput (offline)", throughput_rows(results), THROUGHPUT_NOTE,
                              plot_title="Throughput (offline)", plot=plot_throughput),
                ReportSection("Best batch (offline)", best_batch_rows(results), BEST_BATCH_NOTE,
                              rich_title="best batch (offline): the most samples/s per backend")]


# The worker: each side through a stream pool


def offline_timed(compiled, prepared, own: bool, spec: CellSpec) -> tuple[Timed, dict[str, Any]]:
    """The backend's own stream pool (``own``; eager's side never has one), else its
    requests back to back on all threads, as a ``Timed`` of enough requests per call to
    last about ``OFFLINE_SAMPLE_S``, with the pool's settings as recorded."""
    from adapters.base import BackToBackPool

    pool = compiled.stream_pool(prepared) if own else None
    if pool is None:
        why = (f"no multi-stream mode in dlcompare for {spec.backend}" if own or spec.is_reference
               else "the eager reference: back to back on all threads")
        pool = BackToBackPool(compiled, prepared, why, spec.threads)
    setting = pool.setting()
    requests = requests_per_sample(pool, setting.requests_in_flight)
    return (Timed(pool.run_requests, requests, lambda: None, requests=requests),
            {**dataclasses.asdict(setting), "requests_per_sample": requests})


def requests_per_sample(pool, in_flight: int) -> int:
    """How many requests one sample issues: enough to last ``OFFLINE_SAMPLE_S``, at least
    twice the requests in flight, a multiple of them (every stream drains as often). Read
    from doubling batches of requests, which warm the pool up too."""
    count = in_flight
    while True:
        start = time.perf_counter()
        pool.run_requests(count)
        elapsed = time.perf_counter() - start
        if elapsed >= OFFLINE_SAMPLE_S / 4:
            break
        count *= 2
    wanted = max(2 * in_flight, math.ceil(OFFLINE_SAMPLE_S * count / max(elapsed, 1e-9)))
    return math.ceil(wanted / in_flight) * in_flight


# The records


def fill_throughput(cell: Cell) -> None:
    """Each sample is milliseconds per inference while the stream pool is kept full, so
    1000 / its median is inferences/s (times the batch: samples/s). The backend's and the
    in-cell eager's, with the stream settings each ran with (``info.offline``)."""
    recorded = cell.conditions.info.get("offline")
    if not recorded or cell.latency is None or cell.eager_latency is None:
        return
    batch = recorded.get("batch")
    block = interval_block(cell)

    def side(stats, setting: dict) -> dict:
        per_s = 1e3 / stats.median
        return {"per_s": per_s, "ci": throughput_interval(stats, cell.spread.process_samples, block),
                "samples_per_s": per_s * batch if batch else None, **setting}

    eager = side(cell.eager_latency, recorded.get(REFERENCE_SIDE) or recorded["backend"])
    cell.scenario.throughput = {"batch": batch, **side(cell.latency, recorded["backend"]), REFERENCE_SIDE: eager}


def throughput_columns(throughput: dict[str, Any] | None) -> dict[str, Any]:
    """results.csv's columns of a cell with a throughput (none for other cells)."""
    if not throughput:
        return {}
    ci, eager = throughput.get("ci") or [None, None], throughput.get(REFERENCE_SIDE) or {}
    return {"throughput_per_s": throughput.get("per_s"), "throughput_ci_low": ci[0], "throughput_ci_high": ci[1],
            "samples_per_s": throughput.get("samples_per_s"), "throughput_batch": throughput.get("batch"),
            "streams": throughput.get("streams"), "requests_in_flight": throughput.get("requests_in_flight"),
            "eager_throughput_per_s": eager.get("per_s")}


# The reports: the throughput table, and where a run timed one workload and backend at
# several batches, the batch at which that backend gave the most samples/s (the figure
# of backends without a multi-stream mode: TVM, Inductor)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def throughput_rows(results: RunResults) -> list[dict[str, Any]]:
    """Per cell, inferences/s with its interval, samples/s at the batch, the streams and
    requests in flight the backend ran with, eager's inferences/s beside it; with a batch
    sweep, a 'best batch' column marks each backend's most samples/s."""
    rows = []
    best = best_batch_cells(results)
    for cell in results.cells:
        tp = cell.scenario.throughput
        if not tp:
            continue
        ci = tp.get("ci") or [None, None]
        threads = tp.get("threads_per_stream")
        rows.append({"workload": cell.label, "backend": cell.backend, "batch": tp.get("batch") or "-",
                     "inferences/s": _rate(tp.get("per_s")), "95% CI": f"{_rate(ci[0])}-{_rate(ci[1])}",
                     "samples/s": _rate(tp.get("samples_per_s")), "streams": tp.get("streams"),
                     "in flight": tp.get("requests_in_flight"), "threads/stream": threads or "-",
                     "eager inferences/s": _rate((tp.get(REFERENCE_SIDE) or {}).get("per_s")),
                     "x eager": f"{cell.speedup:.2f}" if cell.speedup else "-", "how": tp.get("source", "")})
        if best:
            rows[-1]["best batch"] = "best" if id(cell) in best else ""
    return rows


Group = tuple[str, str, str, str]  # workload, size, dtype, backend


def _group(cell: Cell) -> Group:
    return cell.workload, cell.size, cell.dtype, cell.backend


def _samples_per_s(cell: Cell) -> float | None:
    tp = cell.scenario.throughput or {}
    return tp.get("samples_per_s") if cell.status == "ok" and tp.get("batch") else None


def _samples_ci(cell: Cell) -> tuple[float, float] | None:
    """samples/s's 95% interval: the inferences/s interval times the batch."""
    tp = cell.scenario.throughput or {}
    ci = tp.get("ci")
    return (ci[0] * tp["batch"], ci[1] * tp["batch"]) if ci else None


def batch_sweeps(results: RunResults) -> dict[Group, list[Cell]]:
    """The cells with samples/s, by (workload, size, dtype, backend), for the groups timed
    at two or more batches; each group's cells from the most samples/s down."""
    groups: dict[Group, list[Cell]] = {}
    for cell in results.cells:
        if _samples_per_s(cell) is not None:
            groups.setdefault(_group(cell), []).append(cell)
    sweeps = {}
    for key, cells in groups.items():
        if len({_batch(c) for c in cells}) >= 2:
            sweeps[key] = sorted(cells, key=lambda c: -float(_samples_per_s(c) or 0.0))
    return sweeps


def best_batch_cells(results: RunResults) -> set[int]:
    """``id`` of each sweep's best cell (the throughput table marks those rows)."""
    return {id(cells[0]) for cells in batch_sweeps(results).values()}


def _batch(cell: Cell) -> Any:
    return (cell.scenario.throughput or {}).get("batch")


def _ties(cells: list[Cell]) -> str:
    """The batches whose samples/s interval reaches the best one's (never the best itself)."""
    best = _samples_ci(cells[0])
    if best is None:
        return "-"
    tied = [_batch(c) for c in cells[1:] if (ci := _samples_ci(c)) is not None and ci[1] >= best[0]]
    return ", ".join(f"b{b}" for b in tied) or "none"


def best_batch_rows(results: RunResults) -> list[dict[str, Any]]:
    """One row per swept (workload, backend): the best batch, its samples/s, every batch's."""
    rows = []
    for (workload, _size, dtype, backend), cells in batch_sweeps(results).items():
        best = cells[0]
        by_batch = sorted(cells, key=_batch)
        rows.append({"workload": variant_label(workload, None, dtype), "backend": backend,
                     "best batch": _batch(best), "samples/s": f"{_samples_per_s(best):.4g}",
                     "within 95% CI": _ties(cells),
                     "samples/s by batch": ", ".join(f"b{_batch(c)}: {_samples_per_s(c):.4g}" for c in by_batch),
                     "streams": (best.scenario.throughput or {}).get("streams")})
    return rows


def plot_throughput(results: RunResults, panels: Panels) -> str | None:
    """Inferences/s per backend with its 95% interval, one panel per workload; each bar
    says its streams, and eager's figure from the same workers is the dashed line."""
    cells = [c for c in panels.ok_cells(results) if c.scenario.throughput]
    if not cells:
        return None
    fig, axes, workloads = panels.workload_panels(cells)
    for ax, w in zip(axes, workloads):
        mine = [c for c in cells if c.label == w]
        tps = [c.scenario.throughput or {} for c in mine]
        rates = [tp["per_s"] for tp in tps]
        ci = [tp.get("ci") or [r, r] for tp, r in zip(tps, rates)]
        errors = [[r - lo for r, (lo, _) in zip(rates, ci)], [hi - r for r, (_, hi) in zip(rates, ci)]]
        bars = ax.bar(range(len(mine)), rates, yerr=errors, capsize=3)
        for bar, tp, (_, high) in zip(bars, tps, ci):  # above the interval's top, not on it
            ax.annotate(f"{tp.get('streams')} stream(s)", (bar.get_x() + bar.get_width() / 2, high),
                        ha="center", va="bottom", fontsize=6, xytext=(0, 3), textcoords="offset points")
        eager = [tp[REFERENCE_SIDE]["per_s"] for c, tp in zip(mine, tps) if not c.is_reference]
        if eager:
            ax.axhline(statistics.median(eager), linestyle="--", linewidth=1, color="grey", label="eager (in-cell)")
            ax.legend(fontsize=6)
        ax.set_xticks(range(len(mine)), [c.backend for c in mine], fontsize=7, rotation=30)
        batch = tps[0].get("batch")
        ax.set_ylabel("inferences/s" + (f" (batch {batch})" if batch else ""))
        ax.set_title(w, fontsize=9)
    return panels.finish(fig, axes, len(workloads), "Throughput, offline (each backend's own streams; 95% CI)")
