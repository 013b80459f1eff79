"""Reports: they read results and never measure."""

# The records' scenario figures and CSV columns are registered by importing the scenarios
# (compare.results.extensions); everything here derives or writes records.
import compare.scenarios  # noqa: E402, F401
