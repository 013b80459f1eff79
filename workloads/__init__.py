"""Workloads: PyTorch modules with fixed, seeded inputs.

Built-in workloads live in this package; users add their own with
``--workload-file path.py``: a Python file that defines ``Workload`` objects
at module level (or a list named ``WORKLOADS``). The file is run as code.
"""
from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from typing import Any, Iterable

from .base import SIZES, TensorSpec, Workload, WorkloadError

__all__ = [
    "SIZES",
    "SUITES",
    "TensorSpec",
    "Workload",
    "WorkloadError",
    "builtin_workloads",
    "load_workload_file",
    "resolve_workloads",
    "build_model",
    "make_inputs",
]


# --suite: which built-ins run when no --workloads are named (user files always do).
# "all" is the hand-written suites; the zoo (real architectures at published sizes) runs alone.
SUITES = ("paper", "models", "llm", "zoo", "census", "all")


def builtin_workloads(suite: str = "all") -> dict[str, Workload]:
    from .llm import TOY_WORKLOADS, real_decoders
    from .models import MODEL_WORKLOADS
    from .survey import PAPER_WORKLOADS
    from .zoo import zoo_workloads

    if suite not in SUITES:
        raise WorkloadError(f"unknown suite {suite!r} (known: {', '.join(SUITES)})")
    # llm: the real decoders; the hand-written toy decoder is one of "all" (and a test case).
    if suite == "census":  # its workloads come as model specs, one a model (compare.config.model_specs)
        return {}
    picked = {"paper": PAPER_WORKLOADS, "models": MODEL_WORKLOADS,
              "all": PAPER_WORKLOADS + MODEL_WORKLOADS + TOY_WORKLOADS}.get(suite) or (
        real_decoders() if suite == "llm" else zoo_workloads())
    return {w.name: w for w in picked}


def builtin_names_unique() -> dict[str, Workload]:
    """Every built-in by name; a name in two suites would make ``--workloads NAME`` pick one
    silently (the zoo's GPT-2 once shadowed the models suite's), so it is an error."""
    suites = [builtin_workloads(suite) for suite in ("all", "llm", "zoo")]
    names = [name for suite in suites for name in suite]
    clash = sorted({name for name in names if names.count(name) > 1})
    if clash:
        raise WorkloadError(f"built-in workload names in two suites: {', '.join(clash)}")
    return {name: w for suite in suites for name, w in suite.items()}


def load_workload_source(source: str | Path) -> list[Workload]:
    """The workloads of a ``--workload-file`` (a Python file) or of a ``--model`` spec."""
    from .zoo.intake import is_model_spec, spec_workloads

    if str(source).startswith("census:"):  # census:hf:TYPE, census:timm:NAME, census:torchvision:NAME
        from .zoo.census import census_workload

        return [census_workload(str(source).removeprefix("census:"))]
    return spec_workloads(str(source)) if is_model_spec(str(source)) else load_workload_file(source)


def load_workload_file(path: str | Path) -> list[Workload]:
    """Import a user workload file and return the workloads it defines.

    Errors (missing file, syntax error, exception at import, no workloads,
    invalid fields) are raised as ``WorkloadError`` with a one-line message
    that names the file.
    """
    path = Path(path)
    if not path.is_file():
        raise WorkloadError(f"workload file {path}: no such file")
    module_name = f"_dlcompare_user_workloads_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise WorkloadError(f"workload file {path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise WorkloadError(f"workload file {path}: syntax error at line {exc.lineno}: {exc.msg}") from None
    except Exception as exc:  # the file is user code: report, don't crash
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        raise WorkloadError(
            f"workload file {path}: {type(exc).__name__} at line {frame.lineno}: {exc}"
        ) from None

    found: list[Any] = []
    if hasattr(module, "WORKLOADS"):
        listed = module.WORKLOADS
        if not isinstance(listed, (list, tuple)):
            raise WorkloadError(f"workload file {path}: WORKLOADS must be a list of Workload, got {type(listed).__name__}")
        found = list(listed)
    else:
        found = [v for v in vars(module).values() if isinstance(v, Workload)]
    if not found:
        raise WorkloadError(f"workload file {path}: defines no Workload (define them at module level or in WORKLOADS)")
    workloads = []
    for item in found:
        if not isinstance(item, Workload):
            raise WorkloadError(f"workload file {path}: WORKLOADS holds a {type(item).__name__}, not a Workload")
        item = item.with_source(str(path))
        item.validate()
        workloads.append(item)
    return workloads


def resolve_workloads(names: Iterable[str] | None, files: Iterable[str | Path] = (),
                      suite: str = "paper") -> list[Workload]:
    """Built-ins plus those from ``files`` (workload files and ``--model`` specs); ``names``
    picks (in order) from every built-in, None = the ``suite``'s built-ins and every workload
    in ``files``."""
    from .llm import LLM_TAG
    from .zoo.intake import is_model_spec

    available = builtin_names_unique()
    from_files: dict[str, Workload] = {}
    for file in files:
        loaded = load_workload_source(file)
        if names is None and is_model_spec(str(file)):
            # A --model spec runs as a forward, or with --suite llm as a generation.
            loaded = [w for w in loaded if (LLM_TAG in w.tags) == (suite == "llm")]
            if not loaded:
                raise WorkloadError(f"--model {file}: the decode suite (--suite llm) generates with transformers "
                                    "Llama, Qwen2 and Gemma 3 causal LMs (hf:DIR or hf:config.json)")
        for w in loaded:
            if w.name in from_files:  # never a silent merge: every model a user names runs
                hint = f"; name one: --model OTHER={w.source}" if is_model_spec(w.source) else ""
                raise WorkloadError(f"two workloads named {w.name!r} ({from_files[w.name].source} and {w.source}){hint}")
            from_files[w.name] = w
    available.update(from_files)  # a user file may override a built-in on purpose
    if names is None:
        in_suite = {} if suite == "none" else builtin_workloads(suite)
        return [w for name, w in available.items() if name in in_suite or name in from_files]
    picked = []
    for name in names:
        if name not in available:
            raise WorkloadError(f"unknown workload {name!r} (known: {', '.join(sorted(available))})")
        picked.append(available[name])
    return picked


def build_model(workload: Workload, size: str, seed: int = 0):
    """The module in eval mode, with weights drawn from ``seed``."""
    import torch

    torch.manual_seed(seed)
    model = workload.build(workload.params(size))
    if not isinstance(model, torch.nn.Module):
        raise WorkloadError(
            f"workload {workload.name!r} ({workload.source}): 'build' returned {type(model).__name__}, not nn.Module"
        )
    return model.eval()


def make_inputs(specs: list[TensorSpec], seed: int = 0, device: str = "cpu"):
    """Seeded input tensors for ``specs``; the same seed always gives the same tensors."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    tensors = []
    for spec in specs:
        dtype = getattr(torch, spec.dtype)
        if spec.init.startswith("randint:"):
            high = int(spec.init.split(":", 1)[1])
            t = torch.randint(0, high, spec.shape, generator=gen, dtype=dtype)
        elif spec.init == "ones":
            t = torch.ones(spec.shape, dtype=dtype)
        elif spec.init == "rand":
            t = torch.rand(spec.shape, generator=gen, dtype=torch.float32).to(dtype)
        else:
            t = torch.randn(spec.shape, generator=gen, dtype=torch.float32).to(dtype)
        tensors.append(t.to(device))
    return tensors
