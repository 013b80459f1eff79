"""A standalone script per distinct failure of a zoo or ``--model`` run, ready to file upstream:
the model built as the cell built it (the config inline, seeded random weights, the same call),
the same inputs, and the failing backend's own API alone (``Backend.reproducer``), without
dlcompare. ``reproducers/<model>__<backend>.py`` in the run folder; the coverage matrix links
each. Reports read results and workload definitions; they never measure."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from compare.report import coverage
from compare.report.backends import backend_class
from compare.results.schema import RunResults, atomic_write_text

# Not part of any bug: a torchvision CUDA build beside a CPU torch cannot register its C++ ops,
# and transformers and timm import it (docs/zoo.md); stand in for that registration.
TORCHVISION_GUARD = ["import sys", "import types",
                     'sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("stand-in"))']
CALLED = '''
class Called(torch.nn.Module):
    """The model as the benchmark called it: keyword inputs by name, one output."""

    def __init__(self, model, names, output, extra):
        super().__init__()
        self.model, self.names, self.output, self.extra = model, names, output, extra

    def forward(self, *tensors):
        out = self.model(*tensors) if self.names is None else self.model(**dict(zip(self.names, tensors)), **self.extra)
        if self.output is None:
            return out
        return out[self.output] if isinstance(out, dict) else getattr(out, self.output)
'''


def model_code(entry: dict[str, Any], size: str) -> list[str]:
    """Lines that build the entry's module as ``workloads.zoo.build`` does."""
    from workloads.zoo import input_names, sized_config

    config = sized_config(entry, size)
    if entry["source"] == "hf":
        config = {k: v for k, v in config.items() if k != "architectures"}
        lines = ["import transformers", f"config = transformers.AutoConfig.for_model(**{config!r})",
                 f"cls = transformers.{entry['class']}",
                 'attention = "sdpa" if getattr(cls, "_supports_sdpa", False) else "eager"',
                 "inner = cls._from_config(config, attn_implementation=attention).eval()"]
        if entry["class"] == "WhisperModel":
            lines.append("inner = inner.get_encoder()")
        names = [n for n, _ in input_names(entry["inputs"]["kind"])]
        lines.append('extra = {"use_cache": False} if "use_cache" in inspect.signature(inner.forward).parameters else {}')
        lines.append(f"model = Called(inner, {names!r}, {entry.get('output')!r}, extra).eval()")
        return lines
    if entry["source"] == "timm":
        return ["import timm", f"model = Called(timm.create_model({config['model']!r}, pretrained=False), None, None, {{}}).eval()"]
    return ["import torchvision",
            f"builder = torchvision.models.get_model_builder({config['model']!r})",
            'kwargs = {"weights_backbone": None} if "weights_backbone" in inspect.signature(builder).parameters else {}',
            "inner = builder(weights=None, **kwargs)",
            "if hasattr(inner, 'aux_classifier'):\n    inner.aux_classifier = None",
            f"model = Called(inner, None, {entry.get('output')!r}, {{}}).eval()"]


def input_code(specs) -> list[str]:
    lines = ["generator = torch.Generator().manual_seed(0)", "inputs = ["]
    for s in specs:
        shape, dtype = tuple(s.shape), f"torch.{s.dtype}"
        if s.init == "ones":
            lines.append(f"    torch.ones({shape}, dtype={dtype}),  # {s.name}")
        elif s.init.startswith("randint:"):
            lines.append(f"    torch.randint(0, {s.init.split(':')[1]}, {shape}, generator=generator, dtype={dtype}),  # {s.name}")
        else:
            lines.append(f"    torch.randn({shape}, generator=generator).to({dtype}),  # {s.name}")
    return lines + ["]"]


def script(record: dict[str, Any], workload, entry: dict[str, Any] | None, snippet: str, versions: dict) -> str:
    size = record["size"]
    head = [f'"""Reproducer: {record["model"]} through {record["backend"]} ({record["status"]}).',
            "", f"dlcompare saw: {record['detail']}", "",
            "Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())),
            f"Model: {workload.description}", '"""', "import inspect", "", "import torch", "",
            "torch.manual_seed(0)", "torch.set_num_threads(2)", *TORCHVISION_GUARD]
    if entry is None:  # a pt2 program
        build = [f"model = torch.export.load({workload.params(size)['origin'][4:]!r}).module()"]
    else:
        build = model_code(entry, size)
    return "\n".join([*head, CALLED, *build, *input_code(workload.input_specs(size)), "", snippet.rstrip(), ""])


def entry_of(workload, size: str) -> dict[str, Any] | None:
    from workloads.zoo import load_entry
    from workloads.zoo.intake import spec_entry

    origin = workload.params(size)["origin"]
    if origin.startswith("pt2:"):
        return None
    return load_entry(origin[4:]) if origin.startswith("zoo:") else spec_entry(origin)


def write_reproducers(results: RunResults, run_dir: str | Path) -> list[str]:
    """Write each distinct failure's script once; returns their paths."""
    from workloads import resolve_workloads

    records = {(r["label"], r["backend"]): r for r in coverage.matrix(results)}
    versions = dict(results.environment.get("versions", {}))
    written = []
    for (label, backend), rel in coverage.reproducer_paths(list(records.values())).items():
        if rel in written:  # the same failure on another model: its first model's script serves
            continue
        record = records[(label, backend)]
        (workload,) = resolve_workloads([record["model"]], results.config.get("workload_files", []))
        workload = workload.with_batch(record["batch"]) if record["batch"] is not None else workload
        text = script(record, workload, entry_of(workload, record["size"]), backend_class(backend).reproducer, versions)
        atomic_write_text(Path(run_dir) / rel, text)
        written.append(rel)
    return written
