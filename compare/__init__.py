"""dlcompare: lower the same workloads through several DL compilers and compare them honestly."""

__version__ = "0.1.0"
