"""The worker's steps, in this process, on a fake backend: what a backend's typed
CompileResult turns into in the cell (phases, first call, cache verdict, info)."""
import pytest

import adapters
from adapters.base import Backend, CacheVerdict, CompileResult
from adapters.eager import TorchCompiled
from compare.results.protocol import CellMeasurement
from compare.worker import steps as worker
from conftest import tiny_spec

pytestmark = pytest.mark.unit


class SplitBackend(Backend):
    """Reports its own phase split and a first call made while compiling, like Inductor."""

    name = "split"

    def compile(self, module, example_inputs, ctx):
        with ctx.phase("compile"):
            compiled = TorchCompiled(module, ctx.device)
            compiled.run(example_inputs)
        verdict = CacheVerdict("hit", {"files": 1}) if ctx.cache == "warm" else None
        return CompileResult(compiled, cache=verdict, info={"note": 1}, includes_first_call=True,
                             phases={"trace": 0.25, "codegen": 0.5, "first_call": 0.125})


class PlainBackend(Backend):
    """Times one phase of its own and lets the worker time the first call."""

    name = "plain"

    def compile(self, module, example_inputs, ctx):
        with ctx.phase("wrap"):
            compiled = TorchCompiled(module, ctx.device)
        return CompileResult(compiled, tuning_s=7.0)


@pytest.fixture
def fake_backends(monkeypatch):
    fakes = {"split": SplitBackend, "plain": PlainBackend}
    monkeypatch.setattr(adapters, "get_backend", lambda name: fakes[name]())


def _spec(backend, tmp_path, cache="cold"):
    return tiny_spec(backend, tmp_path, cache=cache, threads=1)


def _measure(spec):
    """The worker's answer as it travels: through its JSON and back."""
    return CellMeasurement.from_json(worker.measure_cell(spec).to_json()).to_dict()


def test_a_backend_split_replaces_the_timed_phases_and_keeps_its_first_call(fake_backends, tmp_path):
    import os

    before = worker.thread_pinning(os.sched_getaffinity(0))["pinned"]  # left by earlier in-process tests
    cell = _measure(_spec("split", tmp_path, cache="warm"))
    assert cell["status"] == "ok" and cell["numerics_ok"] is True
    assert cell["compile_phases"] == {"trace": 0.25, "codegen": 0.5, "first_call": 0.125}
    assert cell["compile_s"] == pytest.approx(0.875)
    pinning = cell["info"].pop("thread_pinning")  # the worker's own readings, beside the backend's facts
    assert cell["info"].pop("float64_reference") == {"draws": 1, "shared": 0, "fp32_ops": []}  # no shared folder: computed here
    assert cell["cache"] == "hit" and cell["info"] == {"note": 1, "cache_evidence": {"files": 1}}
    assert pinning["threads"] >= 1 and pinning["pinned"] == before  # the fake backend pins nothing


def test_the_worker_times_the_first_call_when_the_backend_did_not(fake_backends, tmp_path):
    cell = _measure(_spec("plain", tmp_path, cache="warm"))
    assert list(cell["compile_phases"]) == ["wrap", "first_call"] and cell["compile_phases"]["first_call"] > 0
    assert cell["cache"] == "miss"  # warm, and the backend keeps no store: it built again
    assert cell["tuning_s"] == 7.0 and set(cell["info"]) == {"thread_pinning", "float64_reference"}
    assert _measure(_spec("plain", tmp_path))["cache"] == "cold"


@pytest.mark.parametrize("backend", ["eager", "ort"])
def test_every_worker_imports_the_same_framework_modules_before_timing(tmp_path, backend):
    """The eager-only worker imported nothing beyond torch and ran eager ~11 % slower than
    every compiler's worker, all of which import torch.export and dynamo (norm_residual):
    every worker now imports them first, and they count in torch_import_s."""
    import subprocess
    import sys

    spec = tiny_spec(backend, tmp_path, threads=1).to_json()
    code = (f"import sys; from compare.worker import steps; from compare.results.protocol import CellSpec\n"
            f"b, ctx, seconds = steps.prepare_worker(CellSpec.from_json({spec!r}))\n"
            "print(all(m in sys.modules for m in steps.COMMON_MODULES), seconds > 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True"]
    assert worker.COMMON_MODULES == ("torch.export", "torch._dynamo")


@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2, reason="needs two CPUs to pin one thread to one")
def test_threads_a_backend_pinned_are_counted_and_the_others_are_not():
    import os
    import threading

    cpus = os.sched_getaffinity(0)
    # Threads an earlier in-process test left behind (a runtime's pool) may already be pinned:
    # the test counts the one it pins on top of them.
    before = worker.thread_pinning(cpus)["pinned"]
    bound, release = threading.Event(), threading.Event()

    def pinned_worker():
        os.sched_setaffinity(0, {min(cpus)})  # 0: the calling thread, as a pool's worker binds itself
        bound.set()
        release.wait(10)

    thread = threading.Thread(target=pinned_worker)
    thread.start()
    bound.wait(10)
    try:
        seen = worker.thread_pinning(cpus)
    finally:
        release.set()
        thread.join()
    assert seen["pinned"] == before + 1 and seen["threads"] >= 2 and seen["main_thread_pinned"] is False
    assert worker.thread_pinning(cpus)["pinned"] == before
    assert worker.parse_cpu_list("0-2,5\n") == [0, 1, 2, 5]


@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2, reason="needs two CPUs to pin one thread to one")
def test_pinning_that_lasts_only_while_a_call_runs_is_seen():
    import os
    import time

    cpus = os.sched_getaffinity(0)

    class PinsWhileRunning:  # as OpenVINO's TBB workers: pinned on entering the arena, unpinned on leaving
        def run(self, prepared):
            os.sched_setaffinity(0, {min(cpus)})
            time.sleep(0.02)
            os.sched_setaffinity(0, cpus)

        def synchronize(self):
            pass

    before = worker.thread_pinning(cpus)["pinned"]  # threads earlier in-process tests left pinned
    seen, _ = worker.pinning_during_calls(PinsWhileRunning(), None, cpus)
    assert seen["pinned"] == before + 1 and seen["main_thread_pinned"] is True
    assert worker.thread_pinning(cpus)["pinned"] == before  # idle, the call's pinning no longer shows


@pytest.mark.unit
def test_fp32_is_ieee_fp32_for_matmuls_and_cudnn_convolutions():
    """PyTorch lets cuDNN use TF32 for fp32 convolutions by default; every worker turns it off
    (and the matmul precision to 'highest'), and the cell's settings say so."""
    import torch

    from compare.worker.steps import FP32_SETTINGS, float32_math

    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default
    assert float32_math(torch, "fp32") == FP32_SETTINGS
    assert torch.backends.cudnn.allow_tf32 is False and torch.get_float32_matmul_precision() == "highest"
    assert FP32_SETTINGS == {"float32_matmul_precision": "highest", "cudnn_allow_tf32": False}
