"""Tally of injected faults, printed at the end of the test session (see conftest)."""
from collections import defaultdict

INJECTED: dict[str, int] = defaultdict(int)
LOST: dict[str, int] = defaultdict(int)


def record(kind: str, injected: int = 1, lost: int = 0) -> None:
    INJECTED[kind] += injected
    LOST[kind] += lost
