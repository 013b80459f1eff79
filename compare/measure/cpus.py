"""CPU lists as taskset, pyperf's --affinity and the kernel's Cpus_allowed_list write them."""
from __future__ import annotations


def parse_cpu_list(text: str) -> list[int]:
    """``0,1`` or ``0-3`` or ``0-1,4`` -> the sorted CPUs; ValueError naming what is wrong."""
    cpus: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise ValueError(f"{text!r} is not a CPU list such as 0,1 or 0-3") from None
        if first < 0 or last < first:
            raise ValueError(f"{part!r} is not a CPU range")
        cpus.update(range(first, last + 1))
    return sorted(cpus)
