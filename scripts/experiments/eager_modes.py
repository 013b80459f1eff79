"""Is eager's speed bimodal from one process to the next, and what sets the mode?

Starts K fresh processes for each condition, each in the state of a dlcompare worker
(torch, torch.export and torch._dynamo imported, the run's threads and spin), building
the same eager workload; all processes of all conditions then take turns of a few
rounds each, so that every one samples the same stretch of time. Prints every process's
median per condition and the spread (max/min - 1). Differences between processes of one
condition are the processes' own; differences between conditions are the condition's.

Conditions: the worker environment as dlcompare sets it (allocator, spin), ASLR off
(``setarch -R``: every process gets the same address layout), transparent huge pages
for torch's large buffers (``THP_MEM_ALLOC_ENABLE=1``; this machine's THP mode is
``madvise``), and OpenMP threads bound to cores (``OMP_PROC_BIND=close``).

    python scripts/experiments/eager_modes.py [WORKLOAD=norm_residual] [K=6] [ROUNDS=200] [ALLOCATOR=auto]

Evidence for docs/method.md; it measures, so run it on an idle machine.
"""
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(Path(__file__).resolve().parent))
from process_spread import CHILD as SPREAD_CHILD  # noqa: E402

# process_spread's child, in a dlcompare worker's state: the common modules imported too.
CHILD = SPREAD_CHILD.replace("import json, sys, time, torch", "import json, sys, time, torch, torch.export, torch._dynamo")
assert "torch._dynamo" in CHILD

CONDITIONS = {
    "worker env": ([], {}),
    "ASLR off": (["setarch", "-R"], {}),
    "THP for torch buffers": ([], {"THP_MEM_ALLOC_ENABLE": "1"}),
    "OMP threads bound": ([], {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}),
}


def worker_environment(allocator: str) -> tuple[dict, int]:
    from compare.harness.allocators import allocator_env, resolve
    from compare.harness.cells import worker_env
    from compare.harness.environment import available_cores
    from compare.harness.runner import RunConfig

    name = resolve(allocator)
    threads = min(2, available_cores())  # process_spread's child runs 2 threads
    config = RunConfig(backends=["eager"], workloads=[], threads=threads, allocator=name, malloc_env=allocator_env(name))
    return worker_env(config), threads


def main(argv):
    workload = argv[0] if argv else "norm_residual"
    k = int(argv[1]) if len(argv) > 1 else 6
    total = int(argv[2]) if len(argv) > 2 else 200
    env, threads = worker_environment(argv[3] if len(argv) > 3 else "auto")
    procs = []
    for name, (prefix, extra) in CONDITIONS.items():
        for _ in range(k):
            procs.append((name, subprocess.Popen([*prefix, sys.executable, "-c", CHILD, workload, str(ROOT)],
                                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                                 env=dict(env, **extra))))
    for _, p in procs:
        assert p.stdout.readline().strip() == "ready"
    per_turn = 10
    for _ in range(total // per_turn):
        for _, p in procs:
            p.stdin.write(f"{per_turn}\n")
            p.stdin.flush()
            assert p.stdout.readline().strip() == "done"
    medians: dict[str, list[float]] = {}
    for name, p in procs:
        p.stdin.write("0\n")
        p.stdin.flush()
        medians.setdefault(name, []).append(json.loads(p.stdout.readline()))
        p.wait()
    allocator = env.get("LD_PRELOAD", "glibc") or "glibc"
    print(f"{workload}, {threads} threads, {k} processes per condition, allocator {Path(allocator).name}")
    for name, values in medians.items():
        print(f"  {name:<24} median {statistics.median(values):6.3f} ms; processes {sorted(round(v, 3) for v in values)}; "
              f"spread {max(values) / min(values) - 1:+.1%}")


if __name__ == "__main__":
    main(sys.argv[1:])
