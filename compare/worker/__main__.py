"""``python -m compare.worker SPEC RESULT``: the worker's entry point, which composes what a
spec asks for (an experiment, a decode cell or any other cell) from the layers below it."""
import sys

from compare.experiments import dynamic
from compare.results.protocol import CellMeasurement, CellSpec
from compare.worker.decode import measure_cell
from compare.worker.steps import main


def measure(spec: CellSpec) -> CellMeasurement:
    return dynamic.measure_cell(spec) if spec.dynamic is not None else measure_cell(spec)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], measure))
