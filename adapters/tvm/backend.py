"""Apache TVM: torch.export -> Relax -> (MetaSchedule tuning) -> build -> Relax VM.

``tvm`` tunes with MetaSchedule (Ansor's successor: evolutionary search with an
XGBoost cost model) and keeps the tuning log under
``tuning_logs/tvm/<target key>/<workload key>/`` so a second run reuses it.
``tvm-untuned`` builds the same graph with TVM's default CPU pipeline and no
schedules at all, so a user sees what tuning buys.

Phases: ``export`` (torch.export), ``frontend`` (the Relax importer), ``tune`` (0
when the log is reused), ``build`` (apply records, compile), ``load`` (VM),
``first_call``. Importing TVM itself is the worker's ``import`` phase.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..base import (
    Backend,
    BackendOptions,
    BackendUnavailable,
    CacheVerdict,
    CompileContext,
    Compiled,
    CompileResult,
    DelegatingSession,
    cuda_arch,
    cuda_arch_option,
    export_dynamic_shapes,
    option,
    target_key,
)
from ..profiling import CrossCheck, KernelProfile, ProfileUnavailable, fused_kernel_ops, per_call, wall_ms_per_call
from .log_store import TuningLogError, TuningLogStore

# apache-tvm-ffi 0.1.15.x segfaults as soon as MetaSchedule tuning starts (verified here).
BAD_FFI_PREFIXES = ("0.1.15",)
DEFAULT_TRIALS = 256
DEFAULT_TUNE_MINUTES = 5.0
DEFAULT_MIN_TRIALS_PER_TASK = 16


class TvmCompiled(Compiled):
    def __init__(self, vm, device, is_gpu: bool = False):
        self._vm = vm
        self._main = vm["main"]
        self._device = device
        self._is_gpu = is_gpu

    def synchronize(self) -> None:
        if self._is_gpu:
            self._device.sync()

    def prepare(self, inputs: Sequence[Any]) -> Any:
        import tvm

        return [tvm.runtime.tensor(t.detach().cpu().numpy(), self._device) for t in inputs]

    def run(self, prepared: Any) -> Any:
        return self._main(*prepared)

    def libraries(self, prepared: Any, kinds: set[str]) -> dict[str, str] | None:
        # dlcompare offloads nothing to a BLAS (no cblas/dnnl BYOC): TVM generates every kernel
        return dict.fromkeys(sorted(kinds), "TVM-generated")

    def crosscheck(self, prepared: Any, seconds: float) -> CrossCheck:
        """TVM's own ``time_evaluator`` on the built module: 10 repeats, each long enough
        (``min_repeat_ms``) to hold several calls; the median of their per-call means."""
        repeats = 10
        evaluator = self._vm.time_evaluator("main", self._device, number=1, repeat=repeats,
                                            min_repeat_ms=max(1, int(seconds * 1e3 / repeats)))
        result = evaluator(*prepared)
        return CrossCheck("tvm time_evaluator", float(result.median) * 1e3, repeats)

    def profile(self, prepared: Any, calls: int) -> KernelProfile:
        """Every call the Relax VM makes (kernels, builtins), timed through the VM's own
        instrument hook (``set_instrument``, called before and after each call)."""
        if self._is_gpu:
            raise ProfileUnavailable("TVM's CUDA kernels are not profiled yet (the VM hook does not sync)")
        totals: dict[str, list] = {}
        started: dict[str, float] = {}

        def instrument(func, symbol, before_run, ret_value, *args):
            now = time.perf_counter()
            if before_run:
                started[symbol] = now
            else:
                entry = totals.setdefault(symbol, [0, 0.0])
                entry[0] += 1
                entry[1] += (now - started.pop(symbol, now)) * 1e3
            return 0  # VMInstrumentReturnKind.NO_OP

        self._vm.set_instrument(instrument)
        self.run(prepared)  # one warm call through the hook, left out
        totals.clear()
        wall = wall_ms_per_call(self.run, prepared, calls, self.synchronize)
        rows = [(name, count, ms, fused_kernel_ops(name)) for name, (count, ms) in totals.items()]
        return KernelProfile("Relax VM instrument hook (set_instrument)", calls, wall, per_call(rows, calls),
                             note="VM builtins (allocation, shape checks) are listed as runtime overhead")

    def outputs_to_torch(self, outputs: Any) -> list[Any]:
        import torch

        if hasattr(outputs, "numpy"):
            return [torch.from_numpy(outputs.numpy())]
        flat = []
        for item in outputs:
            flat.extend(self.outputs_to_torch(item))
        return flat


@dataclass(frozen=True)
class TvmOptions(BackendOptions):
    tvm_trials: int = option(DEFAULT_TRIALS, f"MetaSchedule trial budget per workload (default {DEFAULT_TRIALS})",
                             flag="tvm-trials", kind="positive_int", metavar="N")
    tvm_min_trials_per_task: int = option(
        DEFAULT_MIN_TRIALS_PER_TASK, "floor of trials per tuning task: the trial budget is raised to it times the "
        f"tasks, within the time budget (default {DEFAULT_MIN_TRIALS_PER_TASK}, as TVM's end-to-end tutorial)",
        flag="tvm-min-trials-per-task", kind="positive_int", metavar="N")
    tvm_trials_per_task: int | None = option(
        None, "even cap per tuning task (default none: MetaSchedule's task scheduler shares the budget)",
        flag="tvm-trials-per-task", kind="positive_int", metavar="N")
    tvm_tune_minutes: float = option(
        DEFAULT_TUNE_MINUTES, "wall-clock tuning budget per workload; tuning stops at the trial or the time budget, "
        f"whichever comes first (default {DEFAULT_TUNE_MINUTES:g})", flag="tvm-tune-minutes", kind="positive_float",
        metavar="M")
    tvm_default_schedules: str = option(
        "on", "give every TVM kernel without a tuning record a default CPU schedule: a register-tiled matmul, "
        "dlight's CPU rules or a parallel-and-vectorize fallback (default on; dlight: without the matmul rule, "
        "as before it; off: the naked loop nests)", flag="tvm-default-schedules", choices=("on", "dlight", "off"))
    tvm_fast_math: str = option(
        "on", "TVM's fast_erf for GELU and FastMathTransform: exp, tanh, erf, softmax and GELU as vectorizable "
        "approximations instead of scalar libm calls (default on; off: exact)", flag="tvm-fast-math",
        choices=("on", "off"))
    tvm_negative_index_fix: str = option(
        "on", "rewrite x[:, -1] (select with a negative index) to its positive form before TVM's frontend, which "
        "miscompiles the negative one (default on; off: TVM as it comes, e.g. to show or bisect the bug)",
        flag="tvm-negative-index-fix", choices=("on", "off"))
    retune: bool = option(False, "discard stored TVM tuning logs and tune again", flag="retune", kind="flag")
    cuda_arch: str | None = cuda_arch_option()


class _TvmBase(Backend):
    unsupported_op_patterns = (re.compile(r"Unsupported function types? \[?'?([\w.]+)"),)  # Relax's torch.export frontend
    options_type = TvmOptions
    int8_unavailable = ("TVM 0.27's Relax has no post-training quantizer: the QNN dialect and relay.quantize "
                        "went with Relay, and its torch frontend does not import PT2E's quantized_decomposed ops")
    packages = ("apache-tvm", "apache-tvm-ffi")
    onnx_frontend = "tvm.relax.frontend.onnx.from_onnx"
    install_hint = "pip install -e '.[tvm]'"
    devices = ("cpu", "cuda")
    subcommand = "adapters.tvm.logs_command"  # python -m compare tuning-logs
    runtime_modules = ("tvm", "tvm.relax", "tvm.relax.frontend.torch", "tvm.s_tir.meta_schedule",
                       "tvm.s_tir.dlight")
    reproducer = """\
import tvm
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program
with torch.no_grad():
    mod = from_exported_program(torch.export.export(model, tuple(inputs)), unwrap_unit_return_tuple=True)
target = tvm.target.Target({"kind": "llvm", "mcpu": tvm.target.codegen.llvm_get_system_cpu(), "num-cores": 2})
executable = tvm.compile(mod, target=target)
vm = relax.VirtualMachine(executable, tvm.cpu())
print(vm["main"](*[tvm.runtime.tensor(x.numpy()) for x in inputs]))
"""

    @classmethod
    def status_notes(cls, info: dict[str, Any], tuning_s: float | None) -> list[str]:
        """The tuning behind the build (tuned here or the log reused, trials per task),
        and any kernel that ran without a schedule."""
        notes = []
        tuning = info.get("tuning")
        if tuning:
            spent = f", {tuning_s:.0f} s of tuning" if tuning_s is not None else ""
            stopped = {"time": ", time budget reached", "space exhausted": ", search space exhausted"}.get(
                tuning.get("stopped_by"), "")
            notes.append(("log reused" if tuning.get("reused") else f"tuned {tuning.get('trials_measured', 0)} trials")
                         + f" of {tuning.get('trials_requested')}{spent}{stopped}")
            if tuning.get("trials_per_task") is not None:
                notes.append(f"{tuning['trials_per_task']:g} trials/task")
            if shared := tuning.get("tasks_from_store"):
                notes.append(shared_tasks_note(shared, tuning.get("tasks")))
            if untuned := tuning.get("untuned_tasks"):
                notes.append(f"{len(untuned)} of {tuning.get('tasks')} tasks untuned (default schedules)")
        if info.get("unscheduled_functions"):
            notes.append(f"{len(info['unscheduled_functions'])} unscheduled kernel(s)")
        return notes

    @classmethod
    def code_origin(cls, info: dict[str, Any]) -> str | None:
        tuning = info.get("tuning")
        return None if not tuning else "log reused" if tuning.get("reused") else "tuned in the run"

    @classmethod
    def search_curve(cls, info: dict[str, Any]) -> list[dict[str, float]] | None:
        return (info.get("tuning") or {}).get("curve") or None

    def settings(self, ctx: CompileContext) -> dict[str, Any]:
        import os

        return {"frontend": "relax.frontend.torch.from_exported_program", "weights": "bound as constants",
                "target": "cuda" if ctx.device == "cuda" else "llvm, mcpu = host (llvm_get_system_cpu)",
                "num-cores": ctx.threads, "TVM_NUM_THREADS": os.environ.get("TVM_NUM_THREADS"),
                "default_schedules": {"on": "convolutions (1-D ones as height 1) as NHWC/HWIO with a register-tiled "
                                            "CpuConv (output channels vectorized), register-tiled CpuMatmul (8 rows x 2 "
                                            "vectors, packed B strip), then dlight.cpu GEMV + Reduction, then "
                                            "parallel-and-vectorize fallback",
                                      "dlight": "dlight.cpu GEMV + Reduction, then parallel-and-vectorize fallback",
                                      "off": "off (naked loop nests)"}[ctx.options.tvm_default_schedules],
                "math": ("FastGelu + FastMathTransform (exp, tanh, erf, softmax, GELU approximated)"
                         if fast_math_on(ctx) and ctx.device != "cuda" else "exact (libm calls)"),
                "negative_index_fix": ctx.options.tvm_negative_index_fix}

    def required_modules(self) -> tuple[str, ...]:
        return ("tvm", "tvm_ffi")

    def available(self, device: str = "cpu") -> tuple[bool, str]:
        ok, reason = super().available(device)
        if not ok:
            return ok, reason
        try:
            ffi = importlib.metadata.version("apache-tvm-ffi")
        except importlib.metadata.PackageNotFoundError:
            return False, "apache-tvm-ffi is not installed; " + self.install_hint
        if ffi.startswith(BAD_FFI_PREFIXES):
            return False, f"apache-tvm-ffi {ffi} crashes MetaSchedule; install apache-tvm-ffi==0.1.14.post1"
        return True, ""

    # -- shared steps ---------------------------------------------------------
    @staticmethod
    def host_target(threads: int):
        import tvm
        from tvm.target import Target

        mcpu = tvm.target.codegen.llvm_get_system_cpu()
        # The dict form: CLI strings no longer parse in 0.27, and "native" silently
        # falls back to generic code. num-cores is required by the tuner.
        return Target({"kind": "llvm", "mcpu": mcpu, "num-cores": threads}), mcpu

    @staticmethod
    def import_relax(module: Any, example_inputs: Sequence[Any], ctx: CompileContext, dynamic_shapes=None):
        import torch
        from tvm.relax.frontend.torch import from_exported_program

        if getattr(module, "onnx_path", None):  # --model onnx:PATH: Relax's ONNX frontend, weights as constants
            import onnx
            from tvm.relax.frontend.onnx import from_onnx

            ctx.phases["export"] = 0.0
            with ctx.phase("frontend"):
                return from_onnx(onnx.load(str(module.onnx_path)), keep_params_in_input=False)
        with ctx.phase("export"):
            exported = torch.export.export(module, tuple(example_inputs), dynamic_shapes=dynamic_shapes)
            if ctx.options.tvm_negative_index_fix != "off":
                ctx.info["negative_indices_canonicalized"] = canonicalize_negative_indices(exported)
        with ctx.phase("frontend"):
            # Weights are bound as constants (the default): kept as inputs they left
            # runtime transposes that cost more than the matmuls.
            mod = from_exported_program(exported, unwrap_unit_return_tuple=True)
        return mod

    @staticmethod
    def cuda_target(ctx: CompileContext):
        """CUDA target for the GPU's compute capability (``--cuda-arch`` overrides, which
        also lets CUDA code be generated on a machine without a GPU)."""
        from tvm.target import Target

        arch = cuda_arch(ctx)
        return Target({"kind": "cuda", "arch": arch}, host={"kind": "llvm"}), arch

    @staticmethod
    def gpu_default_schedules(mod, target):
        """dlight's default GPU schedules: what an untuned CUDA build needs to bind threads."""
        from tvm.s_tir import dlight as dl

        with target:
            return dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                           dl.gpu.GeneralReduction(), dl.gpu.Fallback())(mod)

    @staticmethod
    def cpu_default_schedules(mod, target, ctx: CompileContext):
        """A register-tiled matmul rule, dlight's CPU rules and a parallel-and-vectorize fallback
        (adapters/tvm/schedules.py) for every function
        without a schedule; the cell records which functions were left unscheduled and
        which got a default schedule (``--tvm-default-schedules off`` keeps the naked build,
        ``dlight`` leaves the matmul rule out)."""
        from .schedules import default_cpu_schedules, unscheduled

        before = unscheduled(mod)
        if default_schedules_on(ctx):
            mod = default_cpu_schedules(mod, target, matmul=ctx.options.tvm_default_schedules == "on")
        after = unscheduled(mod)
        ctx.info["default_scheduled"] = sorted(set(before) - set(after))
        ctx.info["unscheduled_functions"] = after  # > 0: single-threaded scalar loops; the table says so
        return mod

    @staticmethod
    def load(executable, ctx: CompileContext) -> TvmCompiled:
        import tvm
        from tvm import relax

        with ctx.phase("load"):
            device = tvm.cuda(0) if ctx.device == "cuda" else tvm.cpu(0)
            vm = relax.VirtualMachine(executable, device)
        return TvmCompiled(vm, device, is_gpu=ctx.device == "cuda")


class TvmUntunedBackend(_TvmBase):
    name = "tvm-untuned"
    rank = 30
    description = "Apache TVM Relax, default CPU pipeline, no tuning (what tuning buys)"

    def compile(self, module: Any, example_inputs: Sequence[Any], ctx: CompileContext,
                dynamic_shapes=None) -> CompileResult:
        return CompileResult(self.load(self.build(module, example_inputs, ctx, dynamic_shapes), ctx), info=ctx.info)

    def build(self, module: Any, example_inputs: Sequence[Any], ctx: CompileContext, dynamic_shapes=None):
        """Export, import and build (no device needed: CUDA code can be generated anywhere)."""
        import tvm
        from tvm import relax

        mod = self.import_relax(module, example_inputs, ctx, dynamic_shapes)
        with ctx.phase("build"):
            if ctx.device == "cuda":
                target, arch = self.cuda_target(ctx)
                ctx.info["target"] = {"kind": "cuda", "arch": arch}
                with target:
                    mod = relax.pipeline.zero_pipeline()(mod)
                mod = self.gpu_default_schedules(mod, target)
            else:
                target, mcpu = self.host_target(ctx.threads)
                ctx.info["target"] = {"kind": "llvm", "mcpu": mcpu, "num-cores": ctx.threads}
                with target:
                    mod = tvm.transform.Sequential([*math_passes(ctx), *conv_layout_passes(ctx),
                                                    relax.pipeline.zero_pipeline()])(mod)
                mod = self.cpu_default_schedules(mod, target, ctx)
            return tvm.compile(mod, target=target)

    def dynamic_session(self, module, example_inputs, dynamic_dims, strategy, ctx):
        if strategy != "symbolic":
            return super().dynamic_session(module, example_inputs, dynamic_dims, strategy, ctx)
        # A Relax function with symbolic dims builds once and runs any size.
        shapes = export_dynamic_shapes(dynamic_dims, ctx.dynamic_max)
        return DelegatingSession(self, self.compile(module, example_inputs, ctx, shapes).compiled)


class TvmBackend(_TvmBase):
    name = "tvm"
    rank = 40
    description = "Apache TVM Relax + MetaSchedule auto-tuning (tuning logs kept and reused)"

    @classmethod
    def run_condition(cls, options: dict[str, Any]) -> str | None:
        minutes = options.get("tvm_tune_minutes")
        return (f"TVM budget {options.get('tvm_trials', '-')} trials"
                + (f" or {minutes:g} min per workload" if minutes else ""))

    def settings(self, ctx: CompileContext) -> dict[str, Any]:
        return {**super().settings(ctx), "tuner": "MetaSchedule (evolutionary search, XGBoost cost model)",
                "tvm_trials": ctx.options.tvm_trials,
                "tvm_min_trials_per_task": ctx.options.tvm_min_trials_per_task,
                "tvm_trials_per_task": ctx.options.tvm_trials_per_task,
                "tvm_tune_minutes": ctx.options.tvm_tune_minutes,
                "task_scheduler": "gradient (MetaSchedule's default: budget shared across tasks)",
                "cpu_weight_prepack": ("constants' layouts rewritten for the tuned kernels, except gather tables "
                                       "(info: layout_rewrite_skipped)" if ctx.device != "cuda" else False)}

    def dynamic_session(self, module, example_inputs, dynamic_dims, strategy, ctx):
        raise BackendUnavailable(
            "MetaSchedule cannot tune symbolic shapes (DisallowDynamicLoop) and tuning per shape is out of "
            "this experiment's budget; see tvm-untuned for TVM's specialize vs symbolic figures")

    def compile(self, module: Any, example_inputs: Sequence[Any], ctx: CompileContext) -> CompileResult:
        from . import inspection

        inspection.install()
        mod = self.import_relax(module, example_inputs, ctx)
        target, target_info, tkey = self.tuning_target(ctx)
        with ctx.phase("build"):
            mod, tasks = self.prepare_for_tuning(mod, target, ctx)
        info, database = self.tune_or_reuse(mod, tasks, target, tkey, ctx)
        info["target"] = target_info
        with ctx.phase("build"):
            executable = self.build_tuned(mod, database, target, ctx)
        ctx.info["tuning"] = info
        # "hit" here means: the tuning records were reused, no search ran.
        cache = CacheVerdict("hit" if info["reused"] else "miss",
                             {"tuning_records_reused": info["reused"], "trials_in_log": info["trials_in_log"]})
        return CompileResult(self.load(executable, ctx), cache=cache, info=ctx.info, tuning_s=info["tuning_s_total"])

    def tuning_target(self, ctx: CompileContext):
        """The target, what the cell records of it, and the key its tuning logs live under."""
        import tvm

        if ctx.device == "cuda":
            target, arch = self.cuda_target(ctx)
            return (target, {"kind": "cuda", "arch": arch, "tvm": tvm.__version__},
                    target_key("cuda", ctx.threads, {"tvm": tvm.__version__}, cpu=f"cuda-{arch}"))
        target, mcpu = self.host_target(ctx.threads)
        return (target, {"kind": "llvm", "mcpu": mcpu, "num-cores": ctx.threads, "tvm": tvm.__version__},
                target_key("cpu", ctx.threads, {"tvm": tvm.__version__}, cpu=f"llvm-{mcpu}"))

    @staticmethod
    def prepare_for_tuning(mod, target, ctx: CompileContext):
        """TVM's static-shape tuning pipeline up to the tuner, and the tasks it extracts."""
        import tvm
        from tvm import relax
        from tvm.s_tir import meta_schedule as ms

        gpu = ctx.device == "cuda"
        with target:
            # convolutions as the default schedules take them (NHWC, HWIO): a task the budget
            # leaves untuned runs CpuConv, not the scalar fallback (resnet50: 0.03x eager)
            passes = [*([] if gpu else [*math_passes(ctx), *conv_layout_passes(ctx)]), relax.transform.DecomposeOpsForInference(),
                      relax.transform.CanonicalizeBindings(), relax.pipeline.zero_pipeline()]
            if not gpu:
                passes.append(relax.transform.AttachAttrLayoutFreeBuffers())  # CPU weight prepacking
            mod = tvm.transform.Sequential(passes)(mod)
        if not gpu:
            ctx.info["layout_rewrite_skipped"] = keep_gathers_in_layout(mod)
        return mod, ms.relax_integration.extract_tasks(mod, target)

    def tune_or_reuse(self, mod, tasks, target, tkey: str, ctx: CompileContext):
        """Tune what the stored log lacks of the budget (under the log's lock), commit it,
        and return the cell's tuning record and the database to apply (None: no records).
        A model's first tuning takes the tasks the target's store already holds from other
        models' logs (``shared_tasks``) and tunes only the others."""
        import tvm_ffi
        from tvm.s_tir import meta_schedule as ms

        from . import inspection, tuning
        from .shared_tasks import reuse_stored_tasks
        from .tuning import SearchSettings, TuningBudget

        cap = ctx.options.tvm_trials_per_task
        module_hash = hashlib.sha256(str(tvm_ffi.structural_hash(mod)).encode()).hexdigest()[:10]
        log_dir = Path(ctx.cache_root or ctx.work_dir) / "tvm" / tkey / f"{ctx.workload_key}-{module_hash}"
        store = TuningLogStore(log_dir, tkey, f"{ctx.workload_key}-{module_hash}")
        info: dict[str, Any] = {"target_key": tkey, "log_dir": str(log_dir), "tasks": len(tasks),
                                "task_names": [t.task_name for t in tasks]}
        with store.lock():  # held through tune + commit: a concurrent run waits, then reuses
            state = store.inspect()
            if state.warning:
                info["tuning_log_warning"] = state.warning
            if ctx.options.retune and state.usable:
                store.clear()
                state = store.inspect()
                info["retuned"] = True
            scratch = ctx.work_dir / "tuning"
            store.copy_into(scratch)  # continue from existing records, never edit them in place
            # --retune tunes every task itself; a log of its own keeps what it took before
            from_store = (state.meta.get("tasks_from_store", []) if state.usable else [] if info.get("retuned") else
                          reuse_stored_tasks(tasks, target, log_dir.parent, log_dir, tkey, scratch))
            taken = {r["task"] for r in from_store}
            own = [t for t in tasks if t.task_name not in taken]
            trials = TuningBudget.planned(int(ctx.options.tvm_trials), len(own),
                                          int(ctx.options.tvm_min_trials_per_task)).trials if own else 0
            info.update(trials_requested=trials, tasks_from_store=from_store)
            budget_done = int(state.meta.get("trials_budget", 0)) if state.usable else 0
            budget = TuningBudget(trials=max(trials - budget_done, 0),
                                  minutes=ctx.options.tvm_tune_minutes,
                                  trials_per_task=int(cap) if cap else None)
            meta = {"tasks": len(tasks), "task_names": info["task_names"], "workload": ctx.workload_name,
                    "tasks_from_store": from_store}
            started = time.monotonic()

            def checkpoint(trials_so_far: int) -> None:
                """The log as it stands after a search round, committed: a tuning killed later
                (a timeout, Ctrl-C, a crash) resumes from these records and tunes only what
                its budget still lacks."""
                with contextlib.suppress(OSError, TuningLogError):
                    store.commit(scratch, {**meta, "trials_budget": budget_done + trials_so_far,
                                           "tuning_s": _tuning_seconds(state, time.monotonic() - started),
                                           "stopped_by": "interrupted"})

            outcome = None
            with ctx.phase("tune"):
                if budget.trials > 0 and own:
                    outcome = tuning.tune(own, target, str(scratch), budget,
                                          SearchSettings.for_budget(budget, len(own)),
                                          seed=ctx.seed, initializer=inspection.install, checkpoint=checkpoint)
            tuning_s = _tuning_seconds(state, ctx.phases.get("tune", 0.0) if outcome else 0.0)
            if outcome or (from_store and not state.usable):
                store.commit(scratch, {**meta, "trials_budget": budget_done + budget.trials, "tuning_s": tuning_s,
                                       "stopped_by": outcome.stopped_by if outcome else None})
            after = store.inspect()
            copied = 0 if state.usable else len(from_store)  # one record per reused task, not a trial
            skipped = outcome.skipped if outcome else 0  # not built: the time budget was spent
            info.update(_tuning_record(state, after, outcome, budget, tuning_s, store, copied + skipped))
            info["candidates_skipped_at_deadline"] = skipped
            # what the log holds per task it tuned itself: the figure TVM's tutorial sets a floor for
            info["trials_per_task"] = round((after.records - len(from_store) - skipped) / max(len(own), 1), 1)
            database = ms.database.JSONDatabase(work_dir=str(log_dir)) if after.usable else None
            # a budget that ran out before a task had a round built: it builds with default schedules
            info["untuned_tasks"] = [t.task_name for t in tasks if database is None or database.query_tuning_record(
                t.dispatched[0], target, t.task_name) is None]
        return info, database

    def build_tuned(self, mod, database, target, ctx: CompileContext):
        """Apply the tuning records, give every other kernel a default schedule, compile."""
        import tvm
        from tvm import relax

        if database is not None:
            with target, database:
                mod = relax.transform.MetaScheduleApplyDatabase()(mod)
        if ctx.device == "cuda":
            mod = self.gpu_default_schedules(mod, target)  # any task without a record
        else:
            with target:
                mod = prepack_weights()(mod)
            mod = self.cpu_default_schedules(mod, target, ctx)  # any function without a record
        return tvm.compile(mod, target=target)


def _tuning_record(state, after, outcome, budget, tuning_s, store, not_trials: int) -> dict[str, Any]:
    """What the cell records of the tuning behind its build (this run's and the log's)."""
    return {
        # Wall seconds of all the tuning that produced the log in use (this run's and
        # earlier runs'); None for a log tuned before dlcompare recorded it.
        "tuning_s_total": tuning_s,
        "reused": outcome is None and after.usable,  # no search ran: the records came from a log
        "trials_budget_in_log": int(after.meta.get("trials_budget", 0)),
        "trials_in_log": after.records,
        # not trials: records taken from the store, and candidates the time budget left unbuilt
        "trials_measured": max(after.records - state.records - not_trials, 0),
        "trials_per_task_cap": budget.trials_per_task,
        "minutes_budget": budget.minutes,
        "stopped_by": outcome.stopped_by if outcome else None,
        "search_settings": outcome.settings if outcome else None,
        "history": store.history() if after.usable else [],
        # MetaSchedule's own profiler: seconds per step of the search, this run only
        "profile": outcome.profile if outcome else {},
        "curve": outcome.curve if outcome else [],
    }


def prepack_weights():
    """CPU weight prepacking after tuning: the layout rewrites the tuned kernels asked for,
    split out, lifted and folded into the constants (TVM's static_shape_tuning pipeline)."""
    import tvm
    from tvm import relax

    return tvm.transform.Sequential([relax.transform.SplitLayoutRewritePreproc(),
                                     relax.transform.LiftTransformParams(), relax.transform.FoldConstant()])


OPAQUE_PATTERN = 8  # relax's OpPatternKind kOpaque: TVM's verdict on data-dependent indexing (gathers)


def keep_gathers_in_layout(mod) -> list[str]:
    """Take the layout-free mark off every opaque function (a gather such as ``take``); returns
    their names. MetaSchedule's RewriteLayout (TVM 0.27) rewrites an embedding table read as
    ``A[ids[0], j]`` to ``A_global[j]``, filled from the table's last row, so every token got row
    V-1 and tuned GPT-2 decoded wrong tokens. Prepacking a gather's table buys nothing anyway;
    tests/test_tvm_lowering.py keeps the upstream reproducer."""
    skipped = []
    for gvar, func in list(mod.functions.items()):
        attrs = getattr(func, "attrs", None)
        if (attrs is not None and "layout_free_buffers" in attrs and len(attrs["layout_free_buffers"])
                and "op_pattern" in attrs and int(attrs["op_pattern"]) == OPAQUE_PATTERN):
            mod[gvar] = func.with_attr("layout_free_buffers", [])
            skipped.append(gvar.name_hint)
    return sorted(skipped)


def math_passes(ctx: CompileContext) -> list:
    """Vectorizable exp, tanh, erf, softmax and GELU unless ``--tvm-fast-math off``
    (adapters/tvm/fast_math.py)."""
    from .fast_math import math_passes as passes

    return passes(fast_math_on(ctx))


def conv_layout_passes(ctx: CompileContext) -> list:
    """With the default schedules on (CPU, untuned): every conv2d in NHWC with HWIO weights, the
    layout CpuConv vectorizes over output channels (the weights' transposes fold into the
    constants; the activations are transposed where the graph leaves NHWC)."""
    from tvm import relax

    if ctx.options.tvm_default_schedules != "on":
        return []
    return [relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "HWIO"]}), conv1d_as_conv2d()]


def conv1d_as_conv2d():
    """A module pass: every NCW ``conv1d`` as an NHWC ``conv2d`` of height 1 with HWIO weights,
    the transposes around it explicit, so CpuConv schedules it (wav2vec2's feature encoder and
    Whisper's stem ran TVM's scalar fallback: 0.06x and 0.25x of eager untuned). It runs after
    ConvertLayout: letting that pass carry NHWC on to the ops that follow turned wav2vec2's
    GroupNorm into a channels-last reduction that took 99 % of a 34 s call."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    conv1d = tvm.ir.Op.get("relax.nn.conv1d")
    op = relax.op

    @mutator
    class Rewrite(PyExprMutator):
        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            a = call.attrs
            if not call.op.same_as(conv1d) or a.data_layout != "NCW" or a.kernel_layout != "OIW" or (
                    a.out_layout not in ("", "NCW")):
                return call
            emit = self.builder_.emit
            data = emit(op.permute_dims(emit(op.expand_dims(call.args[0], 2)), [0, 2, 3, 1]))  # N 1 W C
            weight = emit(op.permute_dims(emit(op.expand_dims(call.args[1], 2)), [2, 3, 1, 0]))  # 1 K I O
            left, right = (int(p) for p in a.padding)
            conv = emit(op.nn.conv2d(data, weight, strides=(1, int(a.strides[0])), padding=(0, left, 0, right),
                                     dilation=(1, int(a.dilation[0])), groups=int(a.groups), data_layout="NHWC",
                                     kernel_layout="HWIO", out_dtype=a.out_dtype if str(a.out_dtype) else None))
            return op.squeeze(emit(op.permute_dims(conv, [0, 3, 1, 2])), [2])  # N O 1 W -> N O W

    @relax.transform.function_pass(opt_level=0, name="Conv1dAsConv2d")
    def rewrite(func, mod, _ctx):  # a new function: the module passed in stays as it was
        return Rewrite(mod).visit_expr(func)

    return rewrite


def fast_math_on(ctx: CompileContext) -> bool:
    return ctx.options.tvm_fast_math != "off"


def default_schedules_on(ctx: CompileContext) -> bool:
    return ctx.options.tvm_default_schedules != "off"


def canonicalize_negative_indices(exported) -> int:
    """Rewrite ``aten.select`` with a negative index (``x[:, -1]``) to its positive
    equivalent, in place; returns how many were rewritten. TVM 0.27's PyTorch frontend
    miscompiles the negative form (GPT-2's next-token logits came out non-finite);
    tests/test_tvm_lowering.py keeps a reproducer that tells when upstream fixes it."""
    import torch

    rewritten = 0
    for node in exported.graph_module.graph.nodes:
        if node.op != "call_function" or node.target is not torch.ops.aten.select.int:
            continue
        source, dim, index = node.args
        size = source.meta["val"].shape[dim] if "val" in source.meta else None
        if isinstance(index, int) and index < 0 and isinstance(size, int):
            node.args = (source, dim, index + size)
            rewritten += 1
    if rewritten:
        exported.graph_module.recompile()
    return rewritten


def shared_tasks_note(shared: list[dict[str, Any]], tasks: int | None) -> str:
    """How many tasks came from other models' logs, from which, and that their tuning is
    counted where it was produced (not in this cell's tuning seconds or break-even)."""
    models = sorted({r["from"] for r in shared})
    cost = sum(r["tuning_s_per_task"] or 0.0 for r in shared)
    return (f"{len(shared)} of {tasks} tasks from the store ({', '.join(models)}; about {cost:.0f} s of tuning "
            "counted where it was produced, not here)")


def _tuning_seconds(state, tuned_now_s: float) -> float | None:
    """Seconds of tuning behind the log after this run: what the stored log cost plus
    what this run added. Unknown (None) when the stored log has no such record."""
    if not state.usable:
        return tuned_now_s
    before = state.meta.get("tuning_s")
    return None if before is None else float(before) + tuned_now_s
