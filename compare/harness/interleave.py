"""Interleaved timing: every cell of a workload samples the same stretch of time.

A shared 2-core VM changes speed from second to second (a pure L1 compute loop here
ran up to 45 % faster or 28 % slower from one second to the next), so two medians
taken a minute apart can differ by more than the compilers do. Within a cell the
alternated eager/backend pairs cancel that drift out of the speedup; across cells it
does not, and the eager-only reference would describe a different minute than the
cell it is compared with.

So the cells of one workload run as one group: their workers start one after another,
each compiles and checks its numerics while the others wait, and each stops when it is
ready to time. Then they take turns: each samples for about ``SLICE_S`` seconds while
the others sleep on their stdin, round after round, until every cell's stopping rule is
met. The eager-only cell (the reference) keeps taking turns while any other cell does,
so it covers the whole stretch. Every worker stays its own process: a crash, a hang or
an out-of-memory kill still costs one cell.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from compare.harness.process import WorkerProcess
from compare.results import protocol
from compare.results.protocol import CellMeasurement

SLICE_S = 0.25  # seconds of sampling per turn
# The reference's rounds are short (eager alone), so it takes many more per turn than a
# cell that alternates with a slow backend: capped at max_rounds like the others, it
# stopped while they went on, and described an earlier stretch of time (on
# norm_residual its median ran 6-17 % above every in-cell one). It keeps its turns
# while any other cell samples, up to this many times max_rounds.
REFERENCE_ROUNDS_FACTOR = 20


@dataclass
class Member:
    index: int
    worker: WorkerProcess
    round_s: float
    reference: bool  # the eager-only cell
    rounds: int = 0
    done: bool = False  # its own stopping rule is met
    ended: bool = False  # no longer takes turns (done, full, or died)


def wait_for(worker: WorkerProcess, key: str, timeout_s: float) -> Any:
    """Wait for the worker's next ``key`` event (``ready``, ``imported``); None if it ended (or hung) before."""
    while True:
        event = worker.next_event(timeout_s)
        if event is None:
            return None
        if key in event:
            return event[key]


def wait_ready(worker: WorkerProcess, timeout_s: float) -> dict[str, Any] | None:
    """Wait until the worker is ready to time; None if it ended (or hung) before."""
    return wait_for(worker, "ready", timeout_s)


def take_turn(member: Member, timeout_s: float) -> None:
    rounds = max(1, int(SLICE_S / max(member.round_s, 1e-6)))
    event = member.worker.next_event(timeout_s) if member.worker.send(protocol.rounds_command(rounds)) else None
    while event is not None and "slice" not in event:
        event = member.worker.next_event(timeout_s)
    if event is None:  # the worker died or hung during its turn: collect() says how
        member.ended = True
        return
    member.rounds = event["slice"]["rounds"]
    member.round_s = event["slice"]["round_s"]
    member.done = event["slice"]["done"]


def still_turns(member: Member, members: list[Member], max_rounds: int) -> bool:
    if member.ended:
        return False
    if not member.reference:
        return not member.done and member.rounds < max_rounds
    # The reference samples as long as any other cell does, and at least its own rule.
    others = [m for m in members if m is not member and not m.reference]
    if member.rounds >= REFERENCE_ROUNDS_FACTOR * max_rounds:
        return False
    if any(not m.ended and not m.done and m.rounds < max_rounds for m in others):
        return True
    return not member.done and member.rounds < max_rounds


def start_members(starts: list[Callable[[], WorkerProcess]], cells: list[str], reference: str | None, timeout_s: float,
                  on_worker: Callable[[WorkerProcess | None], None] | None, concurrent_imports: bool,
                  room: Callable[[list[WorkerProcess]], bool] | None = None, deferred: list[int] | None = None):
    """Start the workers and wait until each is ready to time. One after another, each
    importing and compiling while the others wait (a cell whose worker failed starts no
    more); or, with ``concurrent_imports`` (the warm rounds, whose workers wait for a
    compile command after their imports), all importing at once, then, once every one has
    imported, compiling one at a time, so that each warm start is timed on a quiet machine.
    One after another, once a cell's worker is ready beside the reference's, ``room(ready
    workers)`` says whether memory holds one more: where it does not, that worker and the
    rest are not started, and their indices go to ``deferred``."""
    workers: list[WorkerProcess | None] = [None] * len(starts)
    imported: list[bool] = []
    if concurrent_imports:
        started = [start() for start in starts]
        for process in started:
            if on_worker:
                on_worker(process)
        imported = [wait_for(process, "imported", timeout_s) is not None for process in started]
        workers = list(started)
    members: list[Member] = []
    failed: set[str] = set()
    for index, start in enumerate(starts):
        worker = workers[index]
        if concurrent_imports:
            assert worker is not None  # started above
            if not (imported[index] and worker.send(protocol.compile_command())):
                continue  # it died importing: collect() says how
        elif cells[index] in failed:
            continue
        elif room is not None and any(not m.reference for m in members) and not room([m.worker for m in members]):
            if deferred is not None:
                deferred.extend(range(index, len(starts)))
            break
        else:
            worker = workers[index] = start()
            if on_worker:
                on_worker(worker)
        ready = wait_ready(worker, timeout_s)
        if ready is None:
            failed.add(cells[index])
        else:
            members.append(Member(index, worker, ready["round_s"], cells[index] == reference))
    return members, workers


def run_interleaved(starts: list[Callable[[], WorkerProcess]], cells: list[str], reference: str | None,
                    timeout_s: float, max_rounds: int,
                    on_worker: Callable[[WorkerProcess | None], None] | None = None,
                    concurrent_imports: bool = False, room: Callable[[list[WorkerProcess]], bool] | None = None,
                    deferred: list[int] | None = None) -> list[CellMeasurement | None]:
    """Run one group of workers (made by ``starts``, in order; ``cells`` names the cell of
    each, as a cell may run in several processes; ``reference`` names the reference-only cell, if any)
    with interleaved timing. Returns each worker's measurement in order, or None for a worker
    not started because an earlier process of its cell failed before timing (a cell that
    hangs must not cost its timeout K times), or because memory had no room for it (its index
    is then in ``deferred``: see ``start_members``). ``on_worker`` hears of each worker
    started (and None at the end), so that an interrupt can kill them."""
    members, workers = start_members(starts, cells, reference, timeout_s, on_worker, concurrent_imports, room, deferred)
    turn = 0
    while True:
        active = [m for m in members if still_turns(m, members, max_rounds)]
        if not active:
            break
        for member in active[turn % len(active):] + active[:turn % len(active)]:
            if still_turns(member, members, max_rounds):
                take_turn(member, timeout_s)
        turn += 1
    for member in members:
        if member.worker.send(protocol.finish_command()):
            member.worker.wait(timeout_s)
        else:
            member.worker.wait(5)
    results = [worker.collect() if worker else None for worker in workers]
    if on_worker:
        on_worker(None)
    return results
