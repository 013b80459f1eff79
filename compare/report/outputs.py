"""The one writer of a run's files: results.json, results.csv, summary.md, report.html and
paper.md. The runner hands it every save (``Runner(write=write_outputs)``), the commands
the final reports; nothing else writes them."""
from __future__ import annotations

from pathlib import Path

from compare.report.text import write_tables
from compare.results.schema import RunResults, atomic_write_json


def write_outputs(results: RunResults, run_dir: str | Path, *, record: bool = True, reports: bool = False) -> None:
    """results.json first (``record``; atomically, so what was measured is safe before any
    table is drawn), then the tables; with ``reports``, report.html and, for a run with the
    survey's experiments, paper.md."""
    run_dir = Path(run_dir)
    if record:
        atomic_write_json(run_dir / "results.json", results.to_dict())
    write_tables(results, run_dir)
    if reports:
        from compare.report.html import write_html

        write_html(results, run_dir)
        from compare.report import coverage
        from compare.report.reproducers import write_decode_reproducers, write_reproducers

        if coverage.applies(results):
            write_reproducers(results, run_dir)
        write_decode_reproducers(results, run_dir)
        if "dynamic_shapes" in results.experiments or "roofline_ceilings" in results.experiments:
            from compare.report.paper import write_paper

            write_paper(results, run_dir)
