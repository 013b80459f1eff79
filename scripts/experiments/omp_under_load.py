"""What a busy machine does to a multi-threaded eager call: starts NEIGHBOURS busy-loop
processes (default: one per core), then, for each OpenMP setting, K fresh processes that
each time eager on a workload (default mlp, small) at 2 threads in five stretches of 200
calls and print the five medians. With every core taken, libgomp's barrier waits for its
descheduled thread: a process reads either its quiet speed or a scheduler slice per call,
and may switch between the two.

    python scripts/experiments/omp_under_load.py [WORKLOAD=mlp] [K=5] [NEIGHBOURS=cores]

Evidence for docs/method.md (a busy machine); it loads the machine on purpose.
"""
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHILD = r'''
import json, os, statistics, sys, time, torch
sys.path.insert(0, sys.argv[1])
from workloads import build_model, make_inputs, resolve_workloads
torch.set_num_threads(int(os.environ.get("THREADS", "2")))
(w,) = resolve_workloads([sys.argv[2]])
model, x = build_model(w, "small"), make_inputs(w.input_specs("small"))
medians = []
with torch.no_grad():
    for _ in range(50):
        model(*x)
    for _ in range(5):
        times = []
        for _ in range(200):
            start = time.perf_counter(); model(*x); times.append(time.perf_counter() - start)
        medians.append(statistics.median(times) * 1e3)
print(json.dumps([round(m, 4) for m in medians]))
'''
SETTINGS = {"the run's workers (GOMP_SPINCOUNT=10000, 2 threads)": {"GOMP_SPINCOUNT": "10000"},
            "libgomp's default spin (300000), 2 threads": {"GOMP_SPINCOUNT": "300000"},
            "OMP_WAIT_POLICY=PASSIVE, 2 threads": {"OMP_WAIT_POLICY": "PASSIVE"},
            "1 thread": {"THREADS": "1"}}


def main() -> None:
    workload = sys.argv[1] if len(sys.argv) > 1 else "mlp"
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    neighbours = int(sys.argv[3]) if len(sys.argv) > 3 else os.cpu_count() or 2
    loads = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(neighbours)]
    try:
        time.sleep(1)
        print(f"{workload} small, eager, with {neighbours} busy-loop neighbour(s) on {os.cpu_count()} cores; "
              "each row a fresh process, its five medians in ms per call")
        for name, env in SETTINGS.items():
            print(f"\n{name}")
            for _ in range(count):
                out = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), workload], capture_output=True,
                                     text=True, env={**os.environ, "HF_HUB_OFFLINE": "1", **env}, timeout=600)
                medians = json.loads(out.stdout.splitlines()[-1]) if out.returncode == 0 else out.stderr[-200:]
                spread = f" (median {statistics.median(medians):.3f})" if isinstance(medians, list) else ""
                print(f"  {medians}{spread}")
    finally:
        for load in loads:
            load.kill()


if __name__ == "__main__":
    main()
