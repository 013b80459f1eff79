"""Why does eager run slower in a backend's worker than in the eager-only worker?

Issue 56: in the zoo, the in-cell eager beside OpenVINO ran up to +24 % above the
eager-only cell, beside ORT up to +17 %. This separates the candidate causes in one
process, each phase sampled in turns of about a second with the harness's own sampler:

  A  eager alone, before the backend is imported or compiled;
  B  eager alone, after the backend has compiled and run (its presence: memory, loaded
     libraries, thread pools that exist but are not called);
  C  eager alternated with the backend, as a cell times them (the pairing: whatever the
     backend's call leaves running when eager's sample starts).

Then, after each of 30 backend calls, it sleeps 50 ms and reads from /proc the CPU seconds
that the threads the backend created burned meanwhile: a pool that stays awake after its
call shows there, as the cores it keeps busy while nothing calls it.

    python scripts/experiments/eager_beside_backend.py BACKEND WORKLOAD [SIZE=default] [SECONDS=30]
        [--option NAME=VALUE ...]

It re-runs itself under the workers' own environment (the run's allocator, 2 threads, short
spins: compare.harness.cells.worker_env). Run it on an idle machine. Prints the three eager medians, B/A and C/A, and the backend threads' CPU.
"""
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def thread_cpu_s() -> dict[int, float]:
    """CPU seconds (user + system) of each thread of this process, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for stat in Path("/proc/self/task").glob("*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def sample_in_turns(samplers: dict, seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for sampler in samplers.values():
            turn = time.perf_counter() + 1.0
            while time.perf_counter() < turn:
                sampler.take_rounds(1)


def in_worker_env() -> None:
    """Re-execute this script under the environment a worker of a default run gets."""
    if os.environ.get("DLCOMPARE_EXPERIMENT_ENV"):
        return
    from compare.harness import allocators
    from compare.harness.cells import worker_env
    from compare.harness.runner import RunConfig

    allocator = allocators.resolve("auto")
    config = RunConfig(backends=[], workloads=[], threads=2, allocator=allocator, malloc_env=allocators.allocator_env(allocator))
    env = {**worker_env(config), "DLCOMPARE_EXPERIMENT_ENV": "1"}
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def main(argv: list[str]) -> None:
    in_worker_env()
    options = {}
    while "--option" in argv:
        i = argv.index("--option")
        key, value = argv[i + 1].split("=", 1)
        options[key] = {"on": True, "off": False}.get(value, value)
        del argv[i:i + 2]
    backend_name, workload_name = argv[0], argv[1]
    size = argv[2] if len(argv) > 2 else "default"
    seconds = float(argv[3]) if len(argv) > 3 else 30.0

    from compare.harness.cells import CellSpecs
    from compare.harness.runner import RunConfig
    from compare.worker import steps

    config = RunConfig(backends=[backend_name], workloads=[workload_name], threads=2, size=size, options=options)
    from workloads import resolve_workloads
    (workload,) = resolve_workloads([workload_name])
    spec = dataclasses.replace(CellSpecs(config).spec(workload, backend_name), work_dir=tempfile.mkdtemp())
    backend, ctx, _ = steps.prepare_worker(spec)
    setup = steps.CellSetup.build(spec)

    from adapters.eager import TorchCompiled
    from compare.measure.timing import AlternatingSampler, Timed, TimingConfig

    eager_module = TorchCompiled(setup.reference_model, "cpu")
    eager = Timed(eager_module.run, eager_module.prepare(setup.inputs), eager_module.synchronize)
    config_t = TimingConfig(max_samples=10**6, budget_s=10**6)
    before_threads = set(thread_cpu_s())
    alone_a = AlternatingSampler([eager], config_t)
    sample_in_turns({"A": alone_a}, seconds / 3)

    steps.import_backend(backend, ctx)
    compiled = backend.compile(setup.model, setup.inputs, ctx).compiled
    prepared = compiled.prepare(setup.inputs)
    measured = Timed(compiled.run, prepared, compiled.synchronize)
    alone_b = AlternatingSampler([eager], config_t)
    paired = AlternatingSampler([eager, measured], config_t)
    new_threads = set(thread_cpu_s()) - before_threads
    sample_in_turns({"B": alone_b, "C": paired}, seconds)
    idle_cpu, idle_wall = 0.0, 0.0
    for _ in range(30):
        compiled.run(prepared)
        compiled.synchronize()
        before, start = thread_cpu_s(), time.perf_counter()
        time.sleep(0.05)
        after = thread_cpu_s()
        idle_wall += time.perf_counter() - start
        idle_cpu += sum(after.get(t, 0) - before.get(t, 0) for t in new_threads if t in before)
    a = statistics.median(alone_a.samples[0])
    b = statistics.median(alone_b.samples[0])
    c = statistics.median(paired.samples[0])
    backend_ms = statistics.median(paired.samples[1]) * 1e3
    pin = steps.thread_pinning(set(os.sched_getaffinity(0)))
    print(f"{workload_name}/{size} beside {backend_name} {options or ''}: eager A (before) {a * 1e3:.2f} ms, "
          f"B (backend present) {b * 1e3:.2f} ms, C (alternated) {c * 1e3:.2f} ms; B/A {b / a:.3f}, C/A {c / a:.3f}; "
          f"backend {backend_ms:.2f} ms; its {len(new_threads)} threads kept {idle_cpu / idle_wall:.2f} cores busy "
          f"in the 50 ms after its calls; pinned now: {pin}")


if __name__ == "__main__":
    main(sys.argv[1:])
