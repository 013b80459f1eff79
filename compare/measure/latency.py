"""Per-call latency statistics: plain, frozen data that both sides of the worker protocol
and the results file share (``compare.results.protocol``, ``compare.results.schema``)."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Sequence


class RecordError(ValueError):
    """A record read from JSON has a field too many or one too few; the message names it."""


def checked_fields(cls: type, data: Any, what: str, required: bool = True) -> dict[str, Any]:
    """``data`` as keyword arguments of the dataclass ``cls``: any key it does not know is
    an error naming the key, and so is any field missing (every field, with ``required``;
    else those without a default)."""
    if not isinstance(data, dict):
        raise RecordError(f"{what} is not a JSON object")
    fields = dataclasses.fields(cls)
    unknown = sorted(set(data) - {f.name for f in fields})
    if unknown:
        raise RecordError(f"{what} has unknown field(s) {', '.join(unknown)}")
    needed = [f.name for f in fields if required or (f.default is dataclasses.MISSING
                                                     and f.default_factory is dataclasses.MISSING)]
    missing = [name for name in needed if name not in data]
    if missing:
        raise RecordError(f"{what} is missing field(s) {', '.join(missing)}")
    return dict(data)


@dataclass(frozen=True)
class LatencyStats:
    """Per-call latency in milliseconds over ``n`` samples of ``number`` calls each."""

    median: float
    p10: float
    p90: float
    q1: float
    q3: float
    mean: float
    min: float
    n: int
    number: int  # calls averaged into each sample
    samples: list[float] = field(default_factory=list)  # per-call ms, one per sample

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def rel_iqr(self) -> float:
        return self.iqr / self.median if self.median > 0 else math.inf

    @classmethod
    def from_ms(cls, samples_ms: Sequence[float], number: int) -> "LatencyStats":
        """Statistics of per-call samples in milliseconds (``number`` calls each)."""
        import numpy as np

        ms = np.asarray(samples_ms, dtype=np.float64)
        q = np.percentile(ms, [10, 25, 50, 75, 90])
        return cls(median=float(q[2]), p10=float(q[0]), p90=float(q[4]), q1=float(q[1]), q3=float(q[3]),
                   mean=float(ms.mean()), min=float(ms.min()), n=int(ms.size), number=int(number),
                   samples=[float(x) for x in ms])

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], what: str = "latency") -> "LatencyStats":
        return cls(**checked_fields(cls, data, what, required=False))

    @classmethod
    def from_json(cls, value: Any, what: str = "latency") -> "LatencyStats | None":
        """A statistic read from JSON (None stays None)."""
        return None if value is None else value if isinstance(value, cls) else cls.from_dict(value, what)
