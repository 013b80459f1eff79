"""--scenario server (MLPerf LoadGen's Server): after the cell's usual timing, Poisson
arrivals find the highest QPS whose p99 stays within --server-p99-ms, for the backend and
for eager (compare.measure.loadgen; needs dlcompare[loadgen])."""
from __future__ import annotations

from compare.scenarios.base import Scenario


class Server(Scenario):
    name = "server"
    rank = 40
    help = ("after timing, MLPerf LoadGen's Server scenario (Poisson arrivals) finds the highest QPS whose p99 "
            "stays within --server-p99-ms, for the backend and eager (needs dlcompare[loadgen])")
