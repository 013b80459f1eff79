"""--scenario single-stream (MLPerf LoadGen's SingleStream): every request timed on its own,
the next issued when the previous one returned, with p50/p90/p99/p99.9 per request."""
from __future__ import annotations

from typing import Any

from compare.scenarios.base import Scenario

# Enough requests per cell for a p99.9 (1/(1-0.999)), over its processes.
SINGLE_STREAM_REQUESTS = 1000


class SingleStream(Scenario):
    name = "single-stream"
    rank = 20
    help = "every request timed on its own, as MLPerf's SingleStream, with p50/p90/p99/p99.9 per request"

    def timing(self, timing: dict[str, Any], args: Any) -> dict[str, Any]:
        # one request per sample, with no untimed call between requests, until the cell
        # has at least SINGLE_STREAM_REQUESTS (and its time budget is spent)
        per_process = -(-SINGLE_STREAM_REQUESTS // args.processes)
        return {**timing, "per_request": True, "sample_warmup": False,
                "min_samples": max(args.min_samples, per_process), "max_samples": 100 * SINGLE_STREAM_REQUESTS}

    def header(self, config: dict[str, Any]) -> str:
        minimum = config.get("timing", {}).get("min_samples", "?")
        return f"single-stream (one request per sample, at least {minimum} per process)"
