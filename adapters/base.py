"""The one interface every backend implements.

An adapter knows how to lower a module for one backend and how to call the
result, nothing else: the runner owns the clock (phases are marked through
``CompileContext.phase``), the inputs, the numerics and the records.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import importlib.util
import re
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, TypeVar

from .failures import COMMON_PATTERNS, FailureVerdict, classify_failure
from .profiling import CrossCheck, KernelProfile, ProfileUnavailable


class BackendUnavailable(RuntimeError):
    """Raised by an adapter when it cannot run here (missing package, no device)."""


class CommandUsage(ValueError):
    """A backend's subcommand was called wrongly: the CLI prints the message as one line, exit 2."""


def option(default: Any, help: str, flag: str | None = None, choices: Sequence[str] | None = None,
           kind: str = "value", metavar: str | None = None) -> Any:
    """A backend option. With a ``flag`` the CLI offers it (``--flag``); ``kind`` is
    "value" (typed by the default or ``choices``), "switch" (on/off, stored as a bool),
    "flag" (present or not), "positive_int" or "positive_float"."""
    return field(default=default, metadata={"flag": flag, "help": help, "choices": choices, "kind": kind,
                                            "metavar": metavar})


def cuda_arch_option() -> Any:
    """``--cuda-arch``, shared by the backends that generate CUDA code themselves."""
    return option(None, "CUDA arch for TVM/IREE code generation (default: the GPU's compute capability)",
                  flag="cuda-arch", metavar="sm_XY")


def cuda_arch(ctx: "CompileContext") -> str:
    """``--cuda-arch``, else the visible GPU's compute capability (sm_XY)."""
    if getattr(ctx.options, "cuda_arch", None):
        return ctx.options.cuda_arch
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


Options = TypeVar("Options", bound="BackendOptions")


@dataclass(frozen=True)
class BackendOptions:
    """A backend's own settings, declared by the backend (its ``options_type``). The run
    keeps them all in one plain ``config.options`` dict, keyed by field name; the worker
    hands each backend its own, typed."""

    @classmethod
    def from_options(cls: type[Options], options: dict[str, Any]) -> Options:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in options.items() if k in names})

    @classmethod
    def cli_fields(cls) -> list[dataclasses.Field]:
        return [f for f in dataclasses.fields(cls) if f.metadata.get("flag")]

    @classmethod
    def parse_variant(cls, flags: dict[str, str]) -> dict[str, Any]:
        """A variant's ``FLAG=VALUE`` pairs (``ort:ort-spinning=on``) as option values by
        field name, each typed as its CLI flag is; ValueError names a bad one."""
        by_flag = {f.metadata["flag"]: f for f in cls.cli_fields()}
        values = {}
        for flag, text in flags.items():
            if flag not in by_flag:
                known = ", ".join(sorted(by_flag)) or "none"
                raise ValueError(f"no option {flag!r} for this backend (its options: {known})")
            values[by_flag[flag].name] = _typed_value(by_flag[flag], text)
        return values


def _typed_value(f: dataclasses.Field, text: str) -> Any:
    """``text`` as the value of option field ``f``, by its kind (see ``option``)."""
    kind, choices = f.metadata["kind"], f.metadata["choices"]
    if kind in ("switch", "flag"):
        if text not in ("on", "off"):
            raise ValueError(f"{f.metadata['flag']}={text!r}: use on or off")
        return text == "on"
    if choices and text not in choices:
        raise ValueError(f"{f.metadata['flag']}={text!r}: choose from {', '.join(choices)}")
    if kind in ("positive_int", "positive_float") or isinstance(f.default, (int, float)) and not isinstance(f.default, bool):
        number = (int if kind == "positive_int" or isinstance(f.default, int) else float)(text)
        if kind.startswith("positive") and number <= 0:
            raise ValueError(f"{f.metadata['flag']}={text!r}: must be positive")
        return number
    return text


@dataclass
class CompileContext:
    """What the runner hands an adapter for one (workload, backend) cell."""

    workload_name: str
    workload_key: str  # name + size + shapes/dtypes hash, for caches
    device: str  # "cpu" or "cuda"
    threads: int
    work_dir: Path  # scratch space for this cell, deleted afterwards
    cache: str = "cold"  # "cold": build from nothing; "warm": use persistent artifacts
    cache_root: Path | None = None  # persistent store (tuning_logs/), keyed by the adapter
    # Where warm artifacts live when not under cache_root: the store that the first process
    # of a cold cell fills for the cell's later processes (tuning logs stay in cache_root).
    store_root: Path | None = None
    options: Any = field(default_factory=BackendOptions)  # the backend's own options_type
    seed: int = 0  # the run's seed (a tuner's search)
    dynamic_max: int | None = None  # the dynamic-shape experiment: the largest size it will call
    # --dtype int8: the calibration batches (lists of torch tensors, the same for every
    # backend); the adapter hands them to its own quantizer in a ``quantize`` phase.
    calibration: list[list[Any]] | None = None
    # --dtype int8wo/int4wo (the decode suite): the weight bits of the backend's own
    # weight-only recipe (adapters/weight_only.py); None: fp weights.
    weight_bits: int | None = None
    # --scenario: "offline" asks for the backend's own multi-stream setting (a throughput
    # hint, several sessions) at the same total threads; see ``Compiled.stream_pool``.
    scenario: str = "back-to-back"
    # --dtype tf32 (CUDA): fp32 matmuls and convolutions on TF32 tensor cores, where the
    # backend has that math mode (``Backend.tf32_math``); False: strict IEEE fp32.
    tf32: bool = False
    phases: dict[str, float] = field(default_factory=dict)  # phase -> seconds, timed by ``phase``
    # Facts an adapter notes while it compiles (its helpers too); it hands them back as
    # ``CompileResult.info``.
    info: dict[str, Any] = field(default_factory=dict)
    on_phase: Any = None  # callback(name) so the parent can show progress

    def persistent_dir(self, backend: str, target: str) -> Path:
        """``<store root>/<backend>/<target key>/<workload key>/`` (created); the store root is
        ``store_root``, else ``cache_root``."""
        root = self.store_root or self.cache_root or self.work_dir / "store"
        path = Path(root) / backend / target / self.workload_key
        path.mkdir(parents=True, exist_ok=True)
        return path

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self.on_phase is not None:
            self.on_phase(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + (time.perf_counter() - start)


@dataclass(frozen=True)
class CacheVerdict:
    """What a warm compile found in the persistent store, as the backend itself saw it."""
    result: str  # "hit": reused, "miss": built and stored, "bypass": the backend declined to cache
    evidence: dict[str, Any] = field(default_factory=dict)  # the raw facts behind the verdict


@dataclass
class CompileResult:
    """What ``Backend.compile`` returns."""
    compiled: "Compiled"
    cache: CacheVerdict | None = None  # None: the backend keeps nothing between runs
    info: dict[str, Any] = field(default_factory=dict)  # recorded in the cell (usually ``ctx.info``)
    # The backend's own split of its compile phases, in place of those timed with
    # ``ctx.phase`` (torch.compile reports trace and codegen inside one call); None: those.
    phases: dict[str, float] | None = None
    includes_first_call: bool = False  # compiling made the first call (torch.compile compiles on it)
    # A tuned backend: wall seconds of all the tuning behind what it built (this run's and
    # earlier runs' for a reused log); None when unknown or not tuned.
    tuning_s: float | None = None


class Compiled(ABC):
    """A lowered module, callable on backend-native inputs.

    ``prepare`` converts torch inputs once (upload, numpy conversion) outside
    the timed region; ``run`` is what gets timed; ``outputs_to_torch`` converts
    results back for the numerics check (also untimed).
    """

    def prepare(self, inputs: Sequence[Any]) -> Any:
        return list(inputs)

    @abstractmethod
    def run(self, prepared: Any) -> Any: ...

    def outputs_to_torch(self, outputs: Any) -> list[Any]:
        return flatten_outputs(outputs)

    def synchronize(self) -> None:
        """Block until queued device work is done (CUDA); no-op on CPU."""

    def profile(self, prepared: Any, calls: int) -> KernelProfile:
        """The kernels one call runs, from the backend's own profiler; called after timing,
        never inside a timed sample. ``ProfileUnavailable`` says why there is none."""
        raise ProfileUnavailable(f"{type(self).__name__} has no per-kernel profile in dlcompare")

    def libraries(self, prepared: Any, kinds: set[str]) -> dict[str, str] | None:
        """Which library ran the GEMMs and convolutions ({"gemm": "MKL", "conv": "oneDNN"}),
        read from the compiled graph or one untimed call (adapters/libraries.py); ``kinds``
        are those eager's ops hold. None: unknown."""
        return None

    def crosscheck(self, prepared: Any, seconds: float) -> CrossCheck:
        """The same artifact and inputs timed for about ``seconds`` by the backend's own
        benchmark tool; called after timing. ``ProfileUnavailable`` says why there is none."""
        raise ProfileUnavailable(f"{type(self).__name__} has no benchmark tool of its own in dlcompare")

    def own_timings(self, reset: bool = False) -> dict[str, Any] | None:
        """The runtime's own account of its calls since the last reset (llama.cpp's perf
        counters: prompt and generation tokens/s), read beside dlcompare's clock; None: it keeps none."""
        return None

    def stream_pool(self, prepared: Any) -> "StreamPool | None":
        """--scenario offline: the backend's own way of keeping several requests in flight
        on ``prepared`` (compiled for it when ``CompileContext.scenario`` is "offline").
        None: no multi-stream mode in dlcompare for this backend; the worker then issues
        the requests back to back (``BackToBackPool``) on all the run's threads."""
        return None


@dataclass(frozen=True)
class StreamSetting:
    """How a stream pool keeps requests in flight, as recorded in the cell."""

    streams: int  # requests the backend executes at once
    requests_in_flight: int  # requests submitted and not yet completed, at most
    threads_per_stream: int | None  # None: the backend shares its threads out itself
    source: str  # where these numbers come from (a property the backend reported, our choice)


class StreamPool(ABC):
    """--scenario offline: issues requests on one set of prepared inputs with a backend's own
    concurrency and returns when every one has completed. The worker times ``run_requests``
    (the runner owns the clock); a pool only issues and waits."""

    @abstractmethod
    def run_requests(self, requests: int) -> None:
        """Issue ``requests`` inferences and return once all of them have completed."""

    @abstractmethod
    def setting(self) -> StreamSetting: ...


class BackToBackPool(StreamPool):
    """One stream: each request issued when the last one returned, on all the threads the
    compiled artifact was built with (the offline figure of a backend without streams)."""

    def __init__(self, compiled: Compiled, prepared: Any, why: str, threads: int | None = None):
        self._compiled = compiled
        self._prepared = prepared
        self._why = why
        self._threads = threads  # the run's, all on the one stream (None: not said)

    def run_requests(self, requests: int) -> None:
        run, prepared = self._compiled.run, self._prepared
        for _ in range(requests):
            run(prepared)
        self._compiled.synchronize()

    def setting(self) -> StreamSetting:
        return StreamSetting(streams=1, requests_in_flight=1, threads_per_stream=self._threads, source=self._why)


class Backend(ABC):
    """A compiler (or the eager reference) behind one small interface."""

    name: str = ""
    description: str = ""
    # distributions whose versions identify this backend (recorded, used in cache keys,
    # checked on --resume); optional ones are recorded only where installed
    packages: tuple[str, ...] = ()
    optional_packages: tuple[str, ...] = ()
    install_hint: str = ""
    devices: tuple[str, ...] = ("cpu",)
    compiles: bool = True  # False for the eager reference: no artifacts, no cache
    options_type: type[BackendOptions] = BackendOptions  # its settings; flagged fields become CLI options
    rank: int = 100  # where it stands in listings (eager, the reference, first)
    # Python modules the backend needs, imported by the worker in a timed ``import``
    # phase before compiling: no backend's compile time holds its own imports (or
    # not others'), and the memory they load is measured on its own.
    runtime_modules: tuple[str, ...] = ()
    # A variant (``ort:ort-spinning=on``) is this class under the full name, with these
    # option values over the run's: two settings of one backend compared in one run.
    variant: dict[str, Any] = {}
    # --dtype int8: True where the adapter runs its backend's own post-training quantizer on
    # ``CompileContext.calibration``; elsewhere the cell is unavailable for this reason.
    quantizes: bool = False
    int8_unavailable: str = "dlcompare has no int8 path for this backend"
    quantizer_modules: tuple[str, ...] = ()  # what its quantizer imports (the [int8] extra)
    # --dtype tf32: True where the backend computes fp32 matmuls and convolutions in TF32 when
    # ``CompileContext.tf32`` asks (torch's own flags, ORT's use_tf32); elsewhere unavailable.
    tf32_math: bool = False
    # A failure's standalone reproducer (compare/report/reproducers.py): Python lines that
    # lower ``model`` (an nn.Module in eval mode) on ``inputs`` (a list of tensors) with this
    # backend alone, as its own API is called, and run it once; None: no reproducer.
    reproducer: str | None = None
    # A subcommand the backend brings to ``python -m compare`` (TVM: ``tuning-logs``): the
    # module's ``NAME``, ``add_parser(subparsers)`` and ``run(args, console)``; it raises
    # ``CommandUsage`` for a wrong call. None: none.
    subcommand: str | None = None

    # How this backend's frontend says it cannot take an op (the op is group 1), most specific
    # first; ``adapters.failures.COMMON_PATTERNS`` follow them. ``classify_failure`` reads them.
    unsupported_op_patterns: tuple[re.Pattern[str], ...] = ()

    @classmethod
    def classify_failure(cls, info: dict[str, Any], error: str) -> FailureVerdict:
        """A failed cell of this backend as the coverage matrix classes it: export, convert (the
        op named) or compile, from its error and what the worker recorded (``info``)."""
        return classify_failure(info, error, (*cls.unsupported_op_patterns, *COMMON_PATTERNS))

    @classmethod
    def gemm_probe(cls) -> tuple[str, Callable[[int], Callable[[], Any]]] | None:
        """The GEMM library this backend calls, for the roofline's compute ceiling: its name
        and a maker of one n x n x n fp32 GEMM call through it, as the backend calls it.
        None: no library of its own to probe (or the same as another backend's)."""
        return None
    # ``--model onnx:PATH``: how this backend takes an ONNX file (the module's ``onnx_path``);
    # None: it lowers torch programs only, and an ONNX workload is unavailable to it.
    onnx_frontend: str | None = None

    def unavailable_for(self, tags: Sequence[str]) -> str | None:
        """Why this backend cannot take a workload so tagged; None: it can."""
        if "onnx" in tags and self.onnx_frontend is None:
            return f"{self.name} lowers torch programs only; an ONNX file goes to the backends with an ONNX frontend"
        return None

    def weight_only_recipe(self, bits: int) -> dict[str, Any] | None:
        """This backend's weight-only int8/int4 recipe as recorded in the cell
        (adapters/weight_only.py); None: it has none in dlcompare (the cell is unavailable)."""
        return None

    def quantize_weights(self, module: Any, bits: int) -> Any:
        """Weight-only quantization at the module, applied once before compiling (torch
        recipes); a backend that quantizes its own graph does it in ``compile`` instead, when
        ``CompileContext.weight_bits`` is set, and returns the module unchanged here."""
        return module

    def int8_missing(self) -> str | None:
        """Why this backend cannot quantize here (no quantizer, or its package missing); None: it can."""
        if not self.quantizes:
            return self.int8_unavailable
        missing = [m for m in self.quantizer_modules if importlib.util.find_spec(m.split(".")[0]) is None]
        return f"its quantizer needs {', '.join(missing)}: pip install -e '.[int8]'" if missing else None

    def typed_options(self, options: dict[str, Any]) -> Any:
        """This backend's options: the run's ``config.options``, with its variant's on top."""
        return self.options_type.from_options({**options, **self.variant})

    def available(self, device: str = "cpu") -> tuple[bool, str]:
        """(True, "") when this backend can run on ``device`` here, else (False, reason)."""
        for module in self.required_modules():
            if importlib.util.find_spec(module) is None:
                hint = f"; install with: {self.install_hint}" if self.install_hint else ""
                return False, f"python module {module!r} is not installed{hint}"
        if device not in self.devices:
            return False, f"{self.name} has no {device} target in dlcompare"
        if device == "cuda":
            import torch

            if not torch.cuda.is_available():
                return False, "no CUDA device visible to torch"
        return True, ""

    def required_modules(self) -> tuple[str, ...]:
        return ()

    def versions(self) -> dict[str, str]:
        """Versions of ``packages`` (recorded in the cell, used in cache keys)."""
        out = {}
        for dist in self.packages:
            try:
                out[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                if dist not in self.optional_packages:
                    out[dist] = "not installed"
        return out

    def settings(self, ctx: CompileContext) -> dict[str, Any]:
        """The configuration this backend runs with for this cell (recorded in the cell):
        what its own documentation advises for CPU inference, and anything we chose."""
        return {}

    # What the reports show of this backend's cells, from what its adapter recorded: plain
    # data in, text out, nothing imported (the parent reads results without any compiler).
    @classmethod
    def status_notes(cls, info: dict[str, Any], tuning_s: float | None) -> list[str]:
        """Notes for the table's status column, from the cell's ``info``."""
        return []

    @classmethod
    def run_condition(cls, options: dict[str, Any]) -> str | None:
        """A condition of the whole run that moves this backend's figures, for the header
        (TVM's tuning budget), from the run's backend options."""
        return None

    @classmethod
    def code_origin(cls, info: dict[str, Any]) -> str | None:
        """Where the measured code came from beyond the cache verdict ("log reused",
        "tuned in the run"); ``compare diff`` does not compare cells that differ here."""
        return None

    @classmethod
    def search_curve(cls, info: dict[str, Any]) -> list[dict[str, float]] | None:
        """A tuner's best estimated latency against its effort: points with "trials", "s"
        and "estimated_ms", which report.html plots beside the measured latencies."""
        return None

    def process_env(self, ctx: CompileContext) -> dict[str, str]:
        """Environment variables the worker sets before importing any framework
        (cache folders, thread pools that read their size at import)."""
        return {}

    @abstractmethod
    def compile(self, module: Any, example_inputs: Sequence[Any], ctx: CompileContext) -> CompileResult:
        """Lower ``module`` for ``example_inputs``; mark phases with ``ctx.phase``."""

    def dynamic_session(self, module: Any, example_inputs: Sequence[Any], dynamic_dims: Sequence[dict[int, str]],
                        strategy: str, ctx: CompileContext) -> "ShapeSession":
        """For the dynamic-shape experiment: ``specialize`` (compile per new shape)
        or ``symbolic`` (one compile with symbolic dims)."""
        if strategy == "specialize":
            return ShapeSession(self, module, ctx)
        raise BackendUnavailable(f"{self.name} has no symbolic-shape path in dlcompare")


def flatten_outputs(outputs: Any) -> list[Any]:
    """Nested tuples/lists/dicts of tensors or arrays -> flat list, in order."""
    if isinstance(outputs, (list, tuple)):
        flat: list[Any] = []
        for item in outputs:
            flat.extend(flatten_outputs(item))
        return flat
    if isinstance(outputs, dict):
        return flatten_outputs(list(outputs.values()))
    return [outputs]


def process_thread_names() -> list[str] | None:
    """The names of this process's threads (``/proc/self/task/*/comm``), by which a runtime's
    own pool threads are counted; None where they cannot be read."""
    try:
        return [(task / "comm").read_text().strip() for task in Path("/proc/self/task").iterdir()]
    except OSError:
        return None


def slug(text: str) -> str:
    """Lower-case, [a-z0-9.-] only: safe as one path component."""
    out = "".join(ch if ch.isalnum() or ch in ".-" else "-" for ch in text.lower())
    while "--" in out:
        out = out.replace("--", "-")
    return out.strip("-")[:80] or "unknown"


def host_cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def has_vnni() -> bool:
    """VNNI (or AMX int8) on this CPU, from /proc/cpuinfo's flags. Without it, x86 int8
    kernels multiply u8 by s8 with VPMADDUBSW, whose 16-bit sums saturate: each int8
    quantizer has its own guard for that (ORT reduce_range, torchao reduce_range, NNCF
    overflow_fix), which the adapters turn on only here."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(flag in flags for flag in ("avx512_vnni", "avx_vnni", "amx_int8"))


def target_key(device: str, threads: int, versions: dict[str, str], cpu: str | None = None) -> str:
    """Folder name that separates caches by what makes compiled code differ:
    device, CPU model, thread count and the compiler's version."""
    cpu = cpu or host_cpu_name()
    parts = [device, slug(cpu), f"{threads}t"] + [f"{slug(k)}{slug(v)}" for k, v in sorted(versions.items())]
    return "_".join(parts)


class ShapeSession:
    """Calls a module on inputs whose shapes change from call to call.

    The default strategy, *specialize*, compiles the backend once per new input
    shape (as a user without symbolic-shape support would). Backends override
    ``Backend.dynamic_session`` for a *symbolic* strategy (one compile for all).
    """

    def __init__(self, backend: "Backend", module: Any, ctx: CompileContext):
        self._backend = backend
        self._module = module
        self._ctx = ctx
        self._compiled: dict[tuple, Compiled] = {}
        self._prepared: dict[tuple, Any] = {}

    @staticmethod
    def shape_key(inputs: Sequence[Any]) -> tuple:
        return tuple(tuple(t.shape) for t in inputs)

    def compiled_for(self, key: tuple, inputs: Sequence[Any]) -> Compiled:
        if key not in self._compiled:
            self._compiled[key] = self._backend.compile(self._module, inputs, self._ctx).compiled
        return self._compiled[key]

    def run(self, inputs: Sequence[Any]) -> tuple[Compiled, Any]:
        key = self.shape_key(inputs)
        compiled = self.compiled_for(key, inputs)
        if key not in self._prepared:
            self._prepared[key] = compiled.prepare(inputs)
        out = compiled.run(self._prepared[key])
        compiled.synchronize()
        return compiled, out

    def compiles(self) -> int | None:
        """Compilations so far, as the backend counts them (None: not exposed)."""
        return len(self._compiled)


class DelegatingSession(ShapeSession):
    """One callable that handles new shapes itself: a symbolic-shape artifact, or
    torch.compile, which recompiles per shape on its own (counted by dynamo)."""

    def __init__(self, backend: "Backend", compiled: Compiled, count=None):
        super().__init__(backend, None, None)  # type: ignore[arg-type]
        self._one = compiled
        self._count = count

    def compiled_for(self, key: tuple, inputs: Sequence[Any]) -> Compiled:
        return self._one

    def compiles(self) -> int | None:
        return self._count() if self._count else 1


def export_dynamic_shapes(dynamic_dims: Sequence[dict[int, str]], max_size: int | None = None):
    """torch.export ``dynamic_shapes`` for positional inputs; dims that share a
    symbolic name (e.g. "batch") share one ``Dim`` so exporters tie them.

    Give the real upper bound: TVM plans static memory for a symbolic dim's upper
    bound, and with 2**16 it asked for tens of GB (std::bad_alloc)."""
    import torch

    max_size = max_size or 1 << 16
    dims: dict[str, Any] = {}
    spec = []
    for per_input in dynamic_dims:
        entry = {}
        for index, name in per_input.items():
            if name not in dims:
                dims[name] = torch.export.Dim(name, min=1, max=max_size)
            entry[int(index)] = dims[name]
        spec.append(entry or None)
    return tuple(spec)
