"""How far apart do fresh processes time the same eager workload, with time drift taken out?

Starts K worker processes that each build the same workload (any built-in, zoo models
included; default size, 2 threads, the imports every worker makes),
then lets them take turns of a few rounds each, so that every process samples the same
stretch of time; prints each process's median and the spread. Differences left are the
processes' own (where their buffers landed). The environment variables given on the
command line (an allocator's LD_PRELOAD, MALLOC_* settings) apply to every process, on top
of a default run's worker environment (compare.harness.cells.worker_env: its allocator,
threads and spins).

    python scripts/experiments/process_spread.py norm_residual [K=5] [ROUNDS=300] [VAR=VALUE ...]

Evidence for docs/method.md (the allocator); it measures, so run it on an idle machine.
"""
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHILD = r'''
import json, sys, time, torch
sys.path.insert(0, sys.argv[2])
from workloads.zoo import guard_torchvision
guard_torchvision(torch.__version__)
import torch.export, torch._dynamo  # as every worker (compare.worker.steps.COMMON_MODULES)
from workloads import resolve_workloads, build_model, make_inputs
torch.set_num_threads(2)
(w,) = resolve_workloads([sys.argv[1]])
model, inputs = build_model(w, "default"), make_inputs(w.input_specs("default"))
def call():
    with torch.no_grad():
        model(*inputs)
for _ in range(5):
    call()
samples = []
print("ready", flush=True)
for line in sys.stdin:
    rounds = int(line)
    if rounds == 0:
        break
    for _ in range(rounds):
        call()  # untimed: absorbs the switch from the other process
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    print("done", flush=True)
print(json.dumps(statistics.median(samples) * 1e3), flush=True)
'''.replace("statistics.median", "__import__('statistics').median")


def main(argv):
    workload = argv[0]
    numbers = [a for a in argv[1:] if "=" not in a]
    k = int(numbers[0]) if numbers else 5
    total = int(numbers[1]) if len(numbers) > 1 else 300
    extra = dict(a.split("=", 1) for a in argv[1:] if "=" in a)
    sys.path.insert(0, str(ROOT))
    from compare.harness import allocators
    from compare.harness.cells import worker_env
    from compare.harness.runner import RunConfig

    allocator = allocators.resolve("auto")
    config = RunConfig(backends=[], workloads=[], threads=2, allocator=allocator,
                       malloc_env=allocators.allocator_env(allocator))
    env = {**worker_env(config), **extra}
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, workload, str(ROOT)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env) for _ in range(k)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    per_turn = 10
    for _ in range(total // per_turn):
        for p in procs:
            p.stdin.write(f"{per_turn}\n")
            p.stdin.flush()
            assert p.stdout.readline().strip() == "done"
    medians = []
    for p in procs:
        p.stdin.write("0\n")
        p.stdin.flush()
        medians.append(json.loads(p.stdout.readline()))
        p.wait()
    mid = statistics.median(medians)
    print(f"{workload} {extra or ''}: medians of {k} processes (ms) {[round(m, 2) for m in medians]}, "
          f"spread {min(medians) / mid - 1:+.1%} .. {max(medians) / mid - 1:+.1%}")


if __name__ == "__main__":
    main(sys.argv[1:])
