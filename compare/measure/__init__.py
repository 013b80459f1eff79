"""Measuring inside a worker: timing, statistics, numerical agreement, memory."""
