"""How dlcompare runs MetaSchedule: a trial budget and a time budget, shared across
tasks by MetaSchedule's own gradient task scheduler, with search rounds sized to the
budget and a builder pool that is not restarted every round.

Measured on a 2-core Zen 3 VM, MLP at the default size, 64 trials (docs/tvm-tuning.md):
with TVM's defaults, building took 40 % of the tuning time, mostly new builder processes
that each import TVM; running candidates 21 % (every candidate timed for >= 100 ms); the
evolutionary search over a 512-program population 20 %.
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class TuningBudget:
    """What the user asked for: trials (global), minutes (wall clock, None = no limit),
    and an optional even cap per task (None: the task scheduler decides)."""
    trials: int
    minutes: float | None = None
    trials_per_task: int | None = None

    @staticmethod
    def planned(trials: int, tasks: int, floor: int, minutes: float | None = None,
                trials_per_task: int | None = None) -> "TuningBudget":
        """The trial budget raised to ``floor`` trials per task (TVM's end-to-end tutorial
        gives each of ResNet-18's tasks at least 16; static_shape_tuning warns that a budget
        spread over many tasks undersubscribes them). The time budget still ends tuning
        first when it is shorter; the cell then records fewer trials per task."""
        return TuningBudget(trials=max(trials, floor * tasks), minutes=minutes, trials_per_task=trials_per_task)


@dataclass(frozen=True)
class SearchSettings:
    """MetaSchedule's knobs, recorded in the cell."""
    trials_per_round: int
    population: int
    genetic_iters: int
    init_min_unmeasured: int
    evaluator_number: int
    evaluator_min_repeat_ms: int
    builder_restart_rounds: int  # a fresh builder pool every N rounds (TVM: every round, for a leak)
    cost_model_warmup_samples: int  # XGBoost predicts at random until it has this many samples

    @staticmethod
    def for_budget(budget: TuningBudget, tasks: int) -> "SearchSettings":
        """Rounds small enough that every task gets several, and a population a few times
        the round size: the search cost then scales with the budget, not with TVM's
        defaults (64 per round, population 512)."""
        per_task = budget.trials / max(tasks, 1)
        per_round = int(min(32, max(8, 2 ** round(math.log2(max(per_task / 2, 1))))))
        return SearchSettings(trials_per_round=per_round, population=max(64, 4 * per_round), genetic_iters=3,
                              init_min_unmeasured=min(50, 2 * per_round), evaluator_number=1,
                              evaluator_min_repeat_ms=40, builder_restart_rounds=16,
                              cost_model_warmup_samples=min(100, max(32, budget.trials // 4)))


@dataclass(frozen=True)
class TuningOutcome:
    """What a tuning run did: why it stopped, MetaSchedule's profile, and the tuning
    curve (one point per search round). Its wall time is the cell's ``tune`` phase."""
    stopped_by: str  # "trials", "time" or "space exhausted" (no new candidate in any task)
    profile: dict[str, float]
    settings: dict[str, Any]
    curve: list[dict[str, float | None]]
    # candidates not built because the time budget was spent (MetaSchedule records each as a
    # failed trial; they are no trial here)
    skipped: int = 0


def tune(tasks: list, target: Any, work_dir: str, budget: TuningBudget, settings: SearchSettings,
         seed: int, initializer: Callable[[], None] | None = None,
         checkpoint: Callable[[int], None] | None = None) -> TuningOutcome:
    """Tune ``tasks`` (MetaSchedule's extracted tasks: all of a model's, or those the
    target's store lacks) into the JSON database in ``work_dir``, as ``tune_relax`` would
    tune a whole module. ``checkpoint(trials so far)`` runs after every search round, once
    the round's records are in the database: a tuning killed later resumes from them."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.relax_integration import extracted_tasks_to_tune_contexts

    monitor = RoundMonitor.create(budget.minutes, settings.trials_per_round, checkpoint)
    contexts, weights = extracted_tasks_to_tune_contexts(
        extracted_tasks=list(tasks), work_dir=work_dir, space="post-order-apply",
        strategy=ms.search_strategy.EvolutionarySearch(
            population_size=settings.population, genetic_num_iters=settings.genetic_iters,
            init_min_unmeasured=settings.init_min_unmeasured),
        seed=seed)
    with ms.Profiler() as profiler, _until_time_budget(monitor):
        ms.tune_tasks(
            tasks=contexts, task_weights=weights, work_dir=work_dir,
            max_trials_global=budget.trials,
            max_trials_per_task=budget.trials_per_task or budget.trials,
            num_trials_per_iter=settings.trials_per_round,
            builder=PooledBuilder.create(timeout_sec=120, initializer=initializer,
                                         restart_rounds=settings.builder_restart_rounds, deadline=monitor.deadline),
            runner=ms.runner.LocalRunner(timeout_sec=60, evaluator_config=ms.runner.EvaluatorConfig(
                number=settings.evaluator_number, repeat=1, min_repeat_ms=settings.evaluator_min_repeat_ms)),
            cost_model=ms.cost_model.XGBModel(num_warmup_samples=settings.cost_model_warmup_samples,
                                              num_tuning_cores=int(target.attrs["num-cores"])),
            measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), monitor])
    return TuningOutcome(stopped_by=monitor.stop_reason or "trials",
                         profile={k: round(float(v), 3) for k, v in profiler.get().items()},
                         settings=asdict(settings), curve=list(monitor.curve), skipped=monitor.skipped)


FAILED_MS = 1e8  # MetaSchedule records a failed candidate with a huge latency


def estimated_latency_ms(weights: list[float], best_ms: list[float | None], tried: int) -> float | None:
    """The model's latency as MetaSchedule estimates it: the sum over tasks of calls x
    best kernel time measured so far. None until every task has had a round; a task whose
    candidates all failed (attention's ``take`` ran out of bounds on random indices) is
    left out, and the curve point counts it."""
    if tried < len(weights):
        return None
    return sum(w * b for w, b in zip(weights, best_ms) if b is not None)


def round_best_ms(runner_results) -> float | None:
    """The best kernel time (ms) among one round's successful candidates."""
    measured = [1e3 * sum(float(x) for x in r.run_secs) / len(r.run_secs)
                for r in runner_results if r.error_msg is None and r.run_secs]
    measured = [x for x in measured if x < FAILED_MS]
    return min(measured) if measured else None


def budget_spent(now: float, deadline: float, round_ends: list[float]) -> bool:
    """Stop at the round end nearest the deadline: when the next round, as long as the
    median round so far, would end more than half a round past it. (Stopping only once
    past the deadline overran a 5-minute budget by 40 s on conv.)"""
    rounds = sorted(b - a for a, b in zip(round_ends, round_ends[1:]))
    typical = rounds[len(rounds) // 2] if rounds else 0.0
    return now + typical / 2 >= deadline


def fixed_space_size(tune_context) -> int | None:
    """How many programs a task's design space holds when none of them makes a random
    decision (None: the space is sampled, so its size is open)."""
    spaces = tune_context.generate_design_space()
    return None if any(len(s.trace.decisions) for s in spaces) else len(spaces)


@contextlib.contextmanager
def _until_time_budget(monitor):
    """Swallow the monitor's stop (it may come back through TVM's FFI as another type)."""
    try:
        yield
    except Exception:  # noqa: BLE001
        if monitor.stop_reason is None:
            raise


class RoundMonitor:
    """A measure callback, run after every search round: records a tuning-curve point
    (seconds, trials, estimated latency) and ends the tuning loop, after the rounds in
    flight are recorded, once the time budget is spent or no task has a new candidate left
    (MetaSchedule keeps searching an exhausted space: 27 s per empty round here)."""

    @staticmethod
    def create(minutes: float | None, trials_per_round: int, checkpoint: Callable[[int], None] | None = None):
        from tvm.ir.utils import derived_object
        from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

        save = checkpoint or (lambda trials: None)

        @derived_object
        class _RoundMonitor(PyMeasureCallback):
            def __init__(self):
                super().__init__()
                self.start = time.monotonic()
                self.deadline = None if minutes is None else self.start + 60.0 * minutes
                self.stop_reason, self.curve, self.trials, self.best, self.skipped = None, [], 0, {}, 0
                self.tried, self.exhausted = set(), set()
                self.round_ends, self.task_trials, self.space_sizes = [self.start], {}, {}

            def _space_measured(self, task, task_id, candidates: int) -> bool:
                """A round that came back short hints at a small space; a space whose
                programs have no random decision holds exactly those programs, and once
                each is measured another search finds nothing (the pointwise chain's one
                program: 27 s per empty search)."""
                if task_id not in self.space_sizes and candidates < trials_per_round:
                    self.space_sizes[task_id] = fixed_space_size(task.ctx)
                size = self.space_sizes.get(task_id)
                return size is not None and self.task_trials[task_id] >= size

            def apply(self, task_scheduler, task_id, candidates, builder_results, runner_results) -> None:
                tasks = list(task_scheduler.tasks_)
                now = time.monotonic()
                self.round_ends.append(now)
                skipped = sum(b.error_msg == SKIPPED for b in builder_results)
                self.skipped += skipped
                self._record(tasks, task_id, runner_results, skipped)
                save(self.trials)
                self.task_trials[task_id] = self.task_trials.get(task_id, 0) + len(runner_results)
                if candidates and not self._space_measured(tasks[task_id], task_id, len(candidates)):
                    self.exhausted.discard(task_id)
                else:
                    self.exhausted.add(task_id)  # nothing new to measure in its space
                if self.deadline is not None and budget_spent(now, self.deadline, self.round_ends):
                    self._stop(tasks, task_id, "time")
                elif all(i in self.exhausted or t.is_terminated for i, t in enumerate(tasks)):
                    self._stop(tasks, task_id, "space exhausted")

            def _record(self, tasks, task_id, runner_results, skipped: int) -> None:
                built = len(runner_results) - skipped
                self.trials += built
                self.tried |= {task_id} if built else set()  # a round the deadline left unbuilt is no try
                best_now = round_best_ms(runner_results)
                if best_now is not None:
                    self.best[task_id] = min(best_now, self.best.get(task_id, best_now))
                estimate = estimated_latency_ms([float(t.task_weight) for t in tasks],
                                                [self.best.get(i) for i in range(len(tasks))], len(self.tried))
                self.curve.append({"s": round(time.monotonic() - self.start, 2), "trials": self.trials,
                                   "estimated_ms": None if estimate is None else float(f"{estimate:.4g}"),
                                   "tasks_without_result": len(tasks) - len(self.best)})

            def _stop(self, tasks, task_id, reason: str) -> None:
                """End the loop once no other task has a round in flight (its results would
                be lost). Terminating tasks from here instead crashed the gradient scheduler,
                which then picked a terminated task. The records are already in the database."""
                if not any(i != task_id and t.measure_candidates is not None and not t.is_terminated
                           for i, t in enumerate(tasks)):
                    self.stop_reason = reason
                    raise StopTuning(reason)

        return _RoundMonitor()


class StopTuning(Exception):
    """Raised from the round monitor to end MetaSchedule's tuning loop."""


# A candidate the builder did not build: the time budget was spent before its round began.
SKIPPED = "dlcompare: the time budget was spent before this round was built"


class PooledBuilder:
    """MetaSchedule's LocalBuilder with one process pool kept across rounds: TVM starts a
    fresh pool every round (against a leak in long-lived workers), and each new worker
    pays for importing TVM. Here the pool is renewed every ``restart_rounds`` rounds.

    Past the ``deadline`` (the time budget), a round after the first is not built: MetaSchedule's
    gradient scheduler first sends every task a round before any result comes back to the
    round monitor, so a model of many tasks overran its budget by that sweep (resnet50: 28
    tasks, 6.9 min of tuning at a 2-minute budget). Its candidates come back as failed builds,
    the task keeps the records it had, and a task with none builds with the default rules."""

    @staticmethod
    def create(timeout_sec: float, initializer, restart_rounds: int, deadline: float | None = None):
        from tvm.ir.utils import derived_object
        from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder, local_builder
        from tvm.s_tir.meta_schedule.utils import cpu_count
        from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

        @derived_object
        class _PooledBuilder(PyBuilder):
            def __init__(self):
                super().__init__()
                self.pool, self.rounds = self._start(), 0

            @staticmethod
            def _start():
                """A new pool whose workers start importing TVM now, while the caller
                goes on (the runner's worker imports it at the same time)."""
                workers = cpu_count(logical=True)
                pool = PopenPoolExecutor(max_workers=workers, timeout=timeout_sec, initializer=initializer)
                for _ in range(workers):
                    pool.submit(int)
                return pool

            def _pool(self):
                if self.rounds and self.rounds % restart_rounds == 0:
                    self.pool.shutdown()
                    self.pool = self._start()
                self.rounds += 1
                return self.pool

            def build(self, build_inputs):
                if self.rounds and deadline is not None and time.monotonic() >= deadline:
                    return [BuilderResult(None, SKIPPED) for _ in build_inputs]
                jobs = [(None, None, b.mod, b.target, local_builder._serialize_params(b.params)) for b in build_inputs]
                results = []
                for done in self._pool().map_with_error_catching(lambda job: local_builder._worker_func(*job), jobs):
                    if done.status == StatusKind.COMPLETE:
                        results.append(BuilderResult(done.value, None))
                    elif done.status == StatusKind.TIMEOUT:
                        results.append(BuilderResult(None, f"PooledBuilder: timeout, killed after {timeout_sec} s"))
                    else:
                        results.append(BuilderResult(None, f"PooledBuilder: an exception occurred\n{done.value}"))
                return results

        return _PooledBuilder()
