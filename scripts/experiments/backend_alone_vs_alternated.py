"""Is a compiled backend faster sampled alone than alternated with eager, in one process?

Under --crosscheck, AOTInductor and OpenVINO ran mlp and attention 16-21 % faster in their
own benchmark tools (each a loop of the artifact alone) than in dlcompare's timing, which
alternates every sample with eager's. This compiles one cell with the backend's own
adapter and times, with the harness's own sampler, the artifact alone (A) and the artifact
alternated with eager on the same inputs (B), in turns of about a second, so that both
sample the same stretch of time:

    python scripts/experiments/backend_alone_vs_alternated.py BACKEND [WORKLOAD=mlp] [SECONDS=60]

Run it with the workers' environment (the allocator's LD_PRELOAD, OMP_NUM_THREADS=2) on an
idle machine. Prints both medians of the backend and their ratio.
"""
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from adapters.eager import TorchCompiled  # noqa: E402
from compare.harness.cells import CellSpecs  # noqa: E402
from compare.harness.runner import RunConfig  # noqa: E402
from compare.measure.timing import AlternatingSampler, Timed, TimingConfig  # noqa: E402
from compare.worker import steps  # noqa: E402
from workloads import build_model, builtin_workloads, make_inputs  # noqa: E402


def compiled_backend(backend_name: str, workload, inputs) -> Timed:
    config = RunConfig(backends=[backend_name], workloads=[workload.name], threads=2)
    spec = dataclasses.replace(CellSpecs(config).spec(workload, backend_name), work_dir=tempfile.mkdtemp())
    backend, ctx, _ = steps.prepare_worker(spec)
    compiled = backend.compile(build_model(workload, "default"), inputs, ctx).compiled
    return Timed(compiled.run, compiled.prepare(inputs), compiled.synchronize)


def main(backend_name: str, name: str = "mlp", seconds: float = 60.0) -> None:
    workload = builtin_workloads()[name]
    inputs = make_inputs(workload.input_specs("default"))
    measured = compiled_backend(backend_name, workload, inputs)
    eager_module = TorchCompiled(build_model(workload, "default"), "cpu")
    eager = Timed(eager_module.run, eager_module.prepare(inputs), eager_module.synchronize)
    config = TimingConfig(max_samples=10**6, budget_s=10**6)
    alone, paired = AlternatingSampler([measured], config), AlternatingSampler([eager, measured], config)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for sampler in (alone, paired):
            turn = time.perf_counter() + 1.0
            while time.perf_counter() < turn:
                sampler.take_rounds(1)
    a, b = statistics.median(alone.samples[0]), statistics.median(paired.samples[1])
    print(f"{name} / {backend_name}: alone {a * 1e3:.2f} ms ({len(alone.samples[0])} samples), alternated with "
          f"eager {b * 1e3:.2f} ms ({len(paired.samples[1])}); alone / alternated = {a / b:.3f}; eager in the pair "
          f"{statistics.median(paired.samples[0]) * 1e3:.2f} ms")


if __name__ == "__main__":
    main(sys.argv[1], *(sys.argv[2:3] or []), *(float(x) for x in sys.argv[3:4]))
