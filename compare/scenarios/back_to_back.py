"""--scenario back-to-back, the default: each sample averages calls made one after
another, and the median of samples is the latency. Every hook's default is this scenario."""
from __future__ import annotations

from compare.scenarios.base import Scenario


class BackToBack(Scenario):
    name = "back-to-back"
    rank = 10
    help = "each sample averages calls made one after another, the median of samples is the latency (default)"
