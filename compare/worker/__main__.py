"""``python -m compare.worker SPEC RESULT``: the worker's entry point, which composes what a
spec asks for (an experiment, a cell of a scenario with a worker of its own such as
decode's, or any other cell) from the layers below it."""
import importlib
import sys

from compare.experiments import dynamic
from compare.results.protocol import CellMeasurement, CellSpec
from compare.scenarios import scenario
from compare.worker.steps import main, measure_cell


def measure(spec: CellSpec) -> CellMeasurement:
    if spec.dynamic is not None:
        return dynamic.measure_cell(spec)
    own = scenario(spec.scenario).worker  # "module:function"
    if own is None:
        return measure_cell(spec)
    module, _, function = own.partition(":")
    return getattr(importlib.import_module(module), function)(spec)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], measure))
