"""``python -m compare system``: what on this machine raises timing noise, read from the
kernel as ``pyperf system show`` does: the frequency governor and turbo, SMT siblings,
isolated CPUs, transparent huge pages, ASLR, steal time (a VM's host taking the CPU),
the load, and other processes busy on the cores. Reads only; changes nothing.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

CPU_SYS = Path("/sys/devices/system/cpu")


@dataclass(frozen=True)
class Check:
    name: str
    value: str
    verdict: str  # "ok", "noise" (raises noise) or "-" (unknown here)
    advice: str = ""


def _read(path: Path | str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _per_cpu(relative: str) -> dict[int, str]:
    out = {}
    for cpu in sorted(os.sched_getaffinity(0)):
        value = _read(CPU_SYS / f"cpu{cpu}" / relative)
        if value is not None:
            out[cpu] = value
    return out


def governor() -> Check:
    values = set(_per_cpu("cpufreq/scaling_governor").values())
    if not values:
        return Check("frequency governor", "not exposed", "-", "a VM: the host sets the clock, so use alternated timing")
    fixed = values == {"performance"}
    return Check("frequency governor", ", ".join(sorted(values)), "ok" if fixed else "noise",
                 "" if fixed else "set the performance governor (cpupower frequency-set -g performance)")


def turbo() -> Check:
    no_turbo = _read(CPU_SYS / "intel_pstate/no_turbo")
    boost = _read(CPU_SYS / "cpufreq/boost")
    if no_turbo is None and boost is None:
        return Check("turbo boost", "not exposed", "-")
    on = (no_turbo == "0") if no_turbo is not None else (boost == "1")
    return Check("turbo boost", "on" if on else "off", "noise" if on else "ok",
                 "turbo changes the clock with the load and heat" if on else "")


def smt() -> Check:
    siblings = _per_cpu("topology/thread_siblings_list")
    shared = sorted({v for v in siblings.values() if ("," in v or "-" in v)})
    if not siblings:
        return Check("SMT siblings", "not exposed", "-")
    return Check("SMT siblings", "; ".join(shared) or "none (one thread per core)", "noise" if shared else "ok",
                 "two workers on siblings share one core: pin with --affinity to one thread per core" if shared else "")


def isolated() -> Check:
    cpus = _read(CPU_SYS / "isolated") or ""
    nohz = _read(CPU_SYS / "nohz_full") or ""
    text = f"isolated: {cpus or 'none'}; nohz_full: {nohz if nohz and nohz != '(null)' else 'none'}"
    return Check("isolated CPUs", text, "ok" if cpus else "-",
                 "" if cpus else "isolcpus= and --affinity give the workers CPUs of their own")


def huge_pages() -> Check:
    enabled = _read("/sys/kernel/mm/transparent_hugepage/enabled") or "not exposed"
    mode = enabled[enabled.find("[") + 1:enabled.find("]")] if "[" in enabled else enabled
    return Check("transparent huge pages", mode, "noise" if mode == "always" else "ok",
                 "with 'always', whether a buffer gets huge pages differs from process to process" if mode == "always"
                 else "")


def aslr() -> Check:
    value = _read("/proc/sys/kernel/randomize_va_space")
    return Check("ASLR", {"0": "off", "1": "partial", "2": "full"}.get(value or "", "unknown"), "-",
                 "every process lands its buffers elsewhere: one reason to time several processes")


def _cpu_ticks() -> tuple[int, int]:
    """(steal, total) ticks of all CPUs from /proc/stat."""
    fields = [int(x) for x in (_read("/proc/stat") or "cpu 0").splitlines()[0].split()[1:]]
    steal = fields[7] if len(fields) > 7 else 0
    return steal, sum(fields)


def steal_and_others(seconds: float = 1.0) -> list[Check]:
    """Steal time and the busiest other processes over ``seconds``."""
    import psutil

    me = os.getpid()
    procs = [p for p in psutil.process_iter(["name", "pid"]) if p.info["pid"] != me]
    for p in procs:
        try:
            p.cpu_percent(None)
        except psutil.Error:
            pass
    steal0, total0 = _cpu_ticks()
    time.sleep(seconds)
    steal1, total1 = _cpu_ticks()
    busy = []
    for p in procs:
        try:
            share = p.cpu_percent(None)
        except psutil.Error:
            continue
        if share >= 5:
            busy.append((share, p.info["name"], p.info["pid"]))
    steal = (steal1 - steal0) / max(1, total1 - total0)
    busy.sort(reverse=True)
    listed = ", ".join(f"{name} ({pid}) {share:.0f}%" for share, name, pid in busy[:5])
    return [Check("steal time", f"{steal:.1%} over {seconds:g} s", "noise" if steal > 0.01 else "ok",
                  "the VM's host runs others on these CPUs" if steal > 0.01 else ""),
            Check("other busy processes", listed or "none at 5% or more", "noise" if busy else "ok",
                  "stop them, or pin them and the run to different CPUs" if busy else "")]


def load() -> Check:
    one, five, _ = os.getloadavg()
    cores = len(os.sched_getaffinity(0))
    return Check("load average", f"{one:.2f} (1 min), {five:.2f} (5 min) on {cores} CPUs",
                 "noise" if one > 0.5 else "ok", "something else is running" if one > 0.5 else "")


def hypervisor() -> Check:
    flags = next((line for line in (_read("/proc/cpuinfo") or "").splitlines() if line.startswith("flags")), "")
    virtual = " hypervisor" in flags
    return Check("virtual machine", "yes" if virtual else "no", "noise" if virtual else "ok",
                 "a shared VM: compare within one run (alternated, interleaved), never across sessions" if virtual
                 else "")


def checks(seconds: float = 1.0) -> list[Check]:
    return [hypervisor(), governor(), turbo(), smt(), isolated(), huge_pages(), aslr(), load(),
            *steal_and_others(seconds)]


def run(args, console) -> int:
    from rich.table import Table

    table = Table(title=f"what raises timing noise here (CPUs {sorted(os.sched_getaffinity(0))})")
    for column in ("check", "value", "verdict", "advice"):
        table.add_column(column, overflow="fold")
    for check in checks():
        style = {"noise": "yellow", "ok": "green"}.get(check.verdict, "")
        table.add_row(check.name, check.value, check.verdict, check.advice, style=style)
    console.print(table)
    return 0
