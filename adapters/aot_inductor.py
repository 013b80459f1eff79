"""AOTInductor: Inductor ahead of time, the deployable form of ``torch.compile``.

``torch.export`` -> ``torch._inductor.aoti_compile_and_package`` (C++ code generation and
a shared-object build, packed into a ``.pt2``) -> ``torch._inductor.aoti_load_package``.
Phases: ``export``, ``compile``, ``load``, ``first_call``. Freezing follows the Inductor
backend's setting (``--inductor-freezing``, on by default). ``--cache warm`` keeps the
``.pt2`` in the store, hash-checked like IREE's vmfb: a warm start is loading that shared
object, the figure to set against Inductor's JIT warm start.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from . import artifacts
from .base import Backend, BackendOptions, CompileContext, CompileResult, DelegatingSession, export_dynamic_shapes, target_key
from .eager import TorchCompiled
from .inductor import InductorCompiled, inductor_configs, quantize_for_inductor

PACKAGE = "model.pt2"


@dataclass(frozen=True)
class AotInductorOptions(BackendOptions):
    # No flags of their own: the run's --inductor-freezing and
    # --inductor-realize-reads-threshold, shared with the inductor backend.
    inductor_freezing: bool = True
    inductor_realize_reads_threshold: int | None = None


class AotInductorCompiled(InductorCompiled):
    """A loaded package; its libraries are read from its generated wrapper source."""

    package: Path | None = None

    def libraries(self, prepared: Any, kinds: set[str]) -> dict[str, str] | None:
        from .libraries import from_aoti_package

        return from_aoti_package(self.package) if self.package else None


class AotInductorBackend(Backend):
    name = "aot-inductor"
    tf32_math = True
    rank = 15
    description = "AOTInductor: torch.export + Inductor ahead of time to a .pt2 package (C++ shared object)"
    reproducer = """\
with torch.no_grad():
    program = torch.export.export(model, tuple(inputs))
    package = torch._inductor.aoti_compile_and_package(program)
    print(torch._inductor.aoti_load_package(package)(*inputs))
"""
    packages = ("torch",)
    devices = ("cpu",)
    options_type = AotInductorOptions
    runtime_modules = ("torch.export", "torch._inductor", "torch._inductor.compile_fx", "torch._inductor.codegen.cpp",
                       "torch._inductor.scheduler")

    def required_modules(self) -> tuple[str, ...]:
        return ("torch",)

    quantizes = True  # int8: the PT2E-quantized model exported and packaged, freezing on (adapters/pt2e.py)
    quantizer_modules = ("torchao",)

    def settings(self, ctx: CompileContext) -> dict[str, Any]:
        from .pt2e import pt2e_settings

        quantized = ctx.calibration is not None
        return {"freezing": ctx.options.inductor_freezing or quantized,
                "inductor_configs": inductor_configs(ctx.options, quantized),
                "package": "aoti_compile_and_package -> .pt2", "loader": "aoti_load_package", "no_grad": True,
                **({"quantizer": pt2e_settings()} if quantized else {})}

    def process_env(self, ctx: CompileContext) -> dict[str, str]:
        # Inductor's cache folder: a fresh one per cold cell, the store's when warm. Loading
        # a package checks the CPU's vector ISA by building a small C++ probe (3.5 s here),
        # which Inductor caches there, as it would on a deployed machine.
        if ctx.cache == "warm":
            folder = ctx.persistent_dir(self.name, target_key(ctx.device, ctx.threads, self.versions())) / "inductor-cache"
        else:
            folder = ctx.work_dir / "inductor-cache"
        return {"TORCHINDUCTOR_CACHE_DIR": str(folder)}

    def compile(self, module: Any, example_inputs: Sequence[Any], ctx: CompileContext) -> CompileResult:
        module = quantize_for_inductor(module, example_inputs, ctx)
        build = lambda path: self._export_and_package(module, example_inputs, ctx, path)  # noqa: E731
        # a stored package matches the configs too
        key = {"inductor_configs": inductor_configs(ctx.options, ctx.calibration is not None)}
        with artifacts.one_file(self, ctx, PACKAGE, build, key) as (package, cache):
            ctx.info["package_bytes"] = package.stat().st_size
            runner = self._load(package, ctx)
        profiled = lambda: self._profiled_package(module, example_inputs, ctx)  # noqa: E731
        compiled = AotInductorCompiled(runner, ctx.device, profiled, warm_calls=1,
                                       fact="a second package with config.cpp.enable_kernel_profile")
        compiled.package = package
        return CompileResult(compiled, cache=cache, info=ctx.info)

    def dynamic_session(self, module, example_inputs, dynamic_dims, strategy, ctx):
        if strategy != "symbolic":
            return super().dynamic_session(module, example_inputs, dynamic_dims, strategy, ctx)
        package = ctx.work_dir / "dynamic.pt2"
        shapes = export_dynamic_shapes(dynamic_dims, ctx.dynamic_max)
        self._export_and_package(module, example_inputs, ctx, package, shapes)
        return DelegatingSession(self, TorchCompiled(self._load(package, ctx), ctx.device))

    @staticmethod
    def _export_and_package(module, example_inputs, ctx: CompileContext, package, dynamic_shapes=None,
                            extra_configs: dict[str, Any] | None = None) -> None:
        import torch
        import torch._inductor

        with ctx.phase("export"):
            exported = torch.export.export(module, tuple(example_inputs), dynamic_shapes=dynamic_shapes)
        configs = {**inductor_configs(ctx.options, ctx.calibration is not None), **(extra_configs or {})}
        with ctx.phase("compile"), torch.no_grad():
            tmp = package.with_name(f".{package.name}.tmp.pt2")
            torch._inductor.aoti_compile_and_package(exported, package_path=str(tmp), inductor_configs=configs)
            tmp.replace(package)  # a crash mid-build leaves no half package under the stored name

    @staticmethod
    def _load(package, ctx: CompileContext):
        import torch._inductor

        with ctx.phase("load"):
            return torch._inductor.aoti_load_package(str(package))

    def _profiled_package(self, module, example_inputs, ctx: CompileContext):
        package = ctx.work_dir / "profiled.pt2"
        scratch = dataclasses.replace(ctx, phases={}, on_phase=None)
        self._export_and_package(module, example_inputs, scratch, package,
                                 extra_configs={"cpp.enable_kernel_profile": True})
        return self._load(package, scratch)
