"""Running a plan: the parent's runner, its executors (local, Ray), worker processes and the protocol between them."""

# The records' scenario figures and CSV columns are registered by importing the scenarios
# (compare.results.extensions); everything here derives or writes records.
import compare.scenarios  # noqa: E402, F401
