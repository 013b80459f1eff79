"""dlcompare: lower the same workloads through several DL compilers and compare them honestly.

``compare.run(...)`` and ``compare.load(run_dir)`` are the Python API (``compare.api``);
importing this package loads nothing else, so workers stay light."""

__version__ = "0.1.0"


def run(**options):
    """See ``compare.api.run``."""
    from compare.api import run as _run

    return _run(**options)


def load(run_dir):
    """See ``compare.api.load``."""
    from compare.api import load as _load

    return _load(run_dir)
