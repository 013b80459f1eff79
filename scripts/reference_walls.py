"""Write compare/harness/reference_walls.json, the estimate's basis for cells a machine never
ran, from one dated run: ``python scripts/reference_walls.py RUN_DIR PAGE``, where PAGE is the
docs/results page that reports that run. Every cell's wall seconds are kept, whatever its
status (a timeout costs its limit, a failure its compile)."""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compare.harness.estimate import REFERENCE_FILE  # noqa: E402
from compare.results.schema import RunResults  # noqa: E402


def main(run_dir: str, page: str) -> None:
    results = RunResults.load(run_dir)
    env = results.environment
    cells = {"|".join((c.label, c.backend, c.size, c.device)): round(c.conditions.wall_s, 1)
             for c in results.cells if c.conditions.wall_s}
    flags = set(env.get("cpu_flags") or [])
    isa = "AMX" if "amx_tile" in flags else "AVX-512" if "avx512f" in flags else "AVX2"
    data = {"source": page, "machine": f"{env.get('cpu_model')} ({isa}), {env.get('threads')} threads",
            "threads": env.get("threads"), "processes": results.config.get("processes", 1), "run_id": results.run_id,
            "cells": cells}
    REFERENCE_FILE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"{REFERENCE_FILE.relative_to(ROOT)}: {len(cells)} cells, {sum(cells.values()) / 3600:.2f} h in all")


if __name__ == "__main__":
    main(*sys.argv[1:3])
