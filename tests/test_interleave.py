"""The interleaving coordinator, on fake workers (no processes): turns, stopping, the
reference's coverage, and a worker that dies in its turn."""
import pytest

from compare.harness.interleave import run_interleaved

pytestmark = pytest.mark.unit


class FakeWorker:
    """Speaks the worker's slice protocol: ready, then one slice event per command."""

    def __init__(self, name, rounds_needed, log, dies_at_turn=None, round_s=0.01, never_ready=False):
        self.name, self.rounds_needed, self.log = name, rounds_needed, log
        self.dies_at_turn, self.round_s = dies_at_turn, round_s
        self.rounds = self.turns = 0
        self.events = [] if never_ready else [{"ready": {"round_s": round_s}}]
        self.finished = self.dead = False

    def next_event(self, timeout_s):
        return self.events.pop(0) if self.events else None

    def send(self, command):
        if self.dead:
            return False
        if command.get("finish"):
            self.finished = True
            return True
        self.turns += 1
        self.log.append(self.name)
        if self.turns == self.dies_at_turn:
            self.dead = True
            return True  # the command went out; no answer will come
        self.rounds += command["rounds"]
        self.events.append({"slice": {"rounds": self.rounds, "done": self.rounds >= self.rounds_needed,
                                      "round_s": self.round_s}})
        return True

    def wait(self, timeout_s):
        pass

    def collect(self):
        return {"name": self.name, "rounds": self.rounds, "finished": self.finished, "dead": self.dead}


def test_cells_take_turns_and_the_reference_covers_the_whole_stretch():
    log = []
    workers = [FakeWorker("eager", 50, log), FakeWorker("fast", 50, log), FakeWorker("slow", 200, log)]
    results = run_interleaved([lambda w=w: w for w in workers], [w.name for w in workers], "eager", 10.0, 300)
    assert [r["finished"] for r in results] == [True, True, True]
    assert log[:3] == ["eager", "fast", "slow"]  # one turn each, in turn
    # the reference took turns for as long as the slowest cell did
    assert results[2]["rounds"] >= 200 and results[0]["rounds"] >= results[2]["rounds"] - 25  # within one turn
    assert 50 <= results[1]["rounds"] < 100  # the fast cell stopped once its rule was met


def test_the_reference_outlasts_the_round_cap_while_a_slow_cell_samples():
    # eager alone: 25 rounds per turn; the slow cell: 2 per turn, 100 needed. Capped at
    # 120 rounds, the reference used to stop after 5 of the slow cell's 50 turns.
    log = []
    workers = [FakeWorker("eager", 10, log, round_s=0.01), FakeWorker("slow", 100, log, round_s=0.1)]
    results = run_interleaved([lambda w=w: w for w in workers], [w.name for w in workers], "eager", 10.0, 120)
    assert results[1]["rounds"] >= 100
    assert abs(log.count("eager") - log.count("slow")) <= 1  # a turn each, to the end
    assert results[0]["rounds"] > 120


def test_a_worker_that_dies_in_its_turn_costs_only_its_cell():
    log = []
    workers = [FakeWorker("eager", 30, log), FakeWorker("crashes", 100, log, dies_at_turn=2),
               FakeWorker("fine", 60, log)]
    results = run_interleaved([lambda w=w: w for w in workers], [w.name for w in workers], "eager", 10.0, 300)
    assert results[1]["dead"] and log.count("crashes") == 2
    assert results[2]["finished"] and results[2]["rounds"] >= 60
    assert results[0]["finished"]


def test_rounds_are_capped():
    log = []
    workers = [FakeWorker("eager", 10, log), FakeWorker("never_precise", 10**6, log)]
    results = run_interleaved([lambda w=w: w for w in workers], [w.name for w in workers], "eager", 10.0, 120)
    assert max(r["rounds"] for r in results) < 120 + 30


def test_a_cell_whose_first_process_fails_before_timing_starts_no_more_processes():
    log, started = [], []
    workers = [FakeWorker("eager", 10, log, never_ready=True), FakeWorker("eager", 10, log),
               FakeWorker("eager", 10, log), FakeWorker("other", 10, log)]

    def starter(w):
        def start():
            started.append(w)
            return w
        return start

    results = run_interleaved([starter(w) for w in workers], ["eager", "eager", "eager", "other"],
                              "eager", 10.0, 300)
    assert started == [workers[0], workers[3]]  # a hung first process is not repeated twice more
    assert results[1] is None and results[2] is None
    assert results[3]["finished"] and results[3]["rounds"] >= 10


class WarmFakeWorker(FakeWorker):
    """A worker of a warm round: it imports, says so, and compiles only when told."""

    def __init__(self, name, rounds_needed, log, dies_importing=False):
        super().__init__(name, rounds_needed, log)
        self.events = [] if dies_importing else [{"imported": True}]
        self.compiled = False

    def send(self, command):
        if command.get("compile"):
            self.log.append(f"compile {self.name}")
            self.compiled = True
            self.events.append({"ready": {"round_s": self.round_s}})
            return True
        return super().send(command)


def test_a_warm_round_imports_at_once_and_compiles_one_at_a_time():
    log, started = [], []
    workers = [WarmFakeWorker("eager", 20, log), WarmFakeWorker("ort", 20, log, dies_importing=True),
               WarmFakeWorker("iree", 20, log)]

    def starter(worker):
        def start():
            started.append(worker.name)
            return worker
        return start
    results = run_interleaved([starter(w) for w in workers], [w.name for w in workers], "eager", 10.0, 300,
                              concurrent_imports=True)
    assert started == ["eager", "ort", "iree"]  # every worker started before any compiled
    assert log[:2] == ["compile eager", "compile iree"]  # in turn; the one that died importing never compiles
    assert results[0]["finished"] and results[2]["finished"] and not workers[1].compiled


@pytest.mark.unit
def test_without_interleaving_each_cell_is_recorded_before_the_next_starts():
    from types import SimpleNamespace

    from compare.harness.executor import CellGroup, Hooks, LocalExecutor

    events = []
    specs = SimpleNamespace(config=SimpleNamespace(interleave=False),
                            cell=lambda measurement, *args, **kwargs: measurement,
                            log_rel=lambda *args: "log")
    executor = LocalExecutor(specs, Hooks(announce=lambda label, b: events.append(f"start {b}"),
                                          phase=lambda *args: None, record=lambda cell: events.append(f"record {cell}")),
                             output_dir=".")
    executor.run_cell = lambda workload, b, **kwargs: b
    executor.run([CellGroup(SimpleNamespace(name="w"), ("eager", "inductor", "ort"), None, "fp32")])
    assert events == ["start eager", "record eager", "start inductor", "record inductor", "start ort", "record ort"]


def test_workers_that_memory_cannot_hold_are_deferred_not_started():
    # Room for two workers: the reference and the first cell run; the rest are deferred, and
    # never a stretch of the reference alone (room is asked once a cell's worker is ready).
    log, started = [], []
    workers = [FakeWorker(n, 20, log) for n in ("eager", "a", "b", "c")]

    def starter(w):
        def start():
            started.append(w.name)
            return w
        return start
    deferred = []
    results = run_interleaved([starter(w) for w in workers], [w.name for w in workers], "eager", 10.0, 300,
                              room=lambda ready: len(ready) < 2, deferred=deferred)
    assert started == ["eager", "a"] and deferred == [2, 3]
    assert results[2] is None and results[3] is None and results[1]["finished"]
    started.clear()
    workers = [FakeWorker(n, 20, log) for n in ("eager", "a", "b")]
    deferred = []
    run_interleaved([starter(w) for w in workers], [w.name for w in workers], "eager", 10.0, 300,
                    room=lambda ready: False, deferred=deferred)
    assert started == ["eager", "a"] and deferred == [2]  # no room at all: still the reference and one cell

