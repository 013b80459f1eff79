"""Is eager slower alone than alternated with another callable, in one process?

In the main job, norm_residual's eager-only cell (eager sampled alone) ran 6-17 %
slower than the eager medians taken alternately with each backend, whatever the
backend. This times, in one process with the harness's own sampler, eager sampled
alone (A) and eager alternated with a second eager module on its own inputs (B), in
turns of about a second, so that both sample the same stretch of time:

    python scripts/experiments/eager_alone_vs_alternated.py [WORKLOAD=norm_residual] [SECONDS=60]

Run it with the workers' environment (the allocator's LD_PRELOAD, OMP_NUM_THREADS=2,
GOMP_SPINCOUNT=10000) on an idle machine. Prints both medians and their ratio.
"""
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from adapters.eager import TorchCompiled  # noqa: E402
from compare.measure.timing import AlternatingSampler, Timed, TimingConfig  # noqa: E402
from workloads import build_model, builtin_workloads, make_inputs  # noqa: E402


def candidate(workload, seed: int) -> Timed:
    torch.manual_seed(seed)
    compiled = TorchCompiled(build_model(workload, "default"), "cpu")
    return Timed(compiled.run, compiled.prepare(make_inputs(workload.input_specs("default"))), compiled.synchronize)


def main(name: str = "norm_residual", seconds: float = 60.0) -> None:
    torch.set_num_threads(2)
    workload = builtin_workloads()[name]
    eager, other = candidate(workload, 0), candidate(workload, 1)
    config = TimingConfig(max_samples=10**6, budget_s=10**6)
    alone, paired = AlternatingSampler([eager], config), AlternatingSampler([eager, other], config)
    faults = {id(alone): 0, id(paired): 0}  # minor page faults during each sampler's turns
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for sampler in (alone, paired):
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            turn = time.perf_counter() + 1.0
            while time.perf_counter() < turn:
                sampler.take_rounds(1)
            faults[id(sampler)] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    a, b = statistics.median(alone.samples[0]), statistics.median(paired.samples[0])
    # calls of the eager module under test: (1 untimed + number) per round
    calls_a = alone.rounds * (1 + alone.numbers[0])
    calls_b = paired.rounds * (2 + sum(paired.numbers))
    print(f"{name}: eager alone {a * 1e3:.2f} ms ({len(alone.samples[0])} samples, "
          f"{faults[id(alone)] / calls_a:.0f} page faults per call), eager alternated with eager {b * 1e3:.2f} ms "
          f"({len(paired.samples[0])}, {faults[id(paired)] / calls_b:.0f} per call); alone / alternated = {a / b:.3f}")


if __name__ == "__main__":
    main(*(sys.argv[1:2] or []), *(float(x) for x in sys.argv[2:3]))
