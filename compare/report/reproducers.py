"""A standalone script per distinct failure of a zoo or ``--model`` run (and per failed LLM
decode cell: its prefill or decode step alone), ready to file upstream:
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
    """Write each failed model's script; returns their paths."""
    from workloads import resolve_workloads

    records = {(r["label"], r["backend"]): r for r in coverage.matrix(results)}
    versions = dict(results.environment.get("versions", {}))
    written = []
    for (label, backend), rel in coverage.reproducer_paths(list(records.values())).items():
        record = records[(label, backend)]
        (workload,) = resolve_workloads([record["model"]], results.config.get("workload_files", []))
        workload = workload.with_batch(record["batch"]) if record["batch"] is not None else workload
        if "origin" not in workload.params(record["size"]):
            continue  # a --workload-file's module: no script rebuilds it
        text = script(record, workload, entry_of(workload, record["size"]), backend_class(backend).reproducer, versions)
        atomic_write_text(Path(run_dir) / rel, text)
        written.append(rel)
    return written


# --- LLM decode cells: the prefill or the decode step that failed, alone -------------------

DECODE_PARTS = ("prefill", "decode")


def decode_failures(results: RunResults) -> dict[tuple[str, str], dict[str, Any]]:
    """{(label, backend): {part, error, path, cell, workload}} for every decode cell whose
    prefill or decode step failed to lower (the worker names the part first in the error), of
    a transformers decoder, where its backend has a reproducer snippet. Weight-only cells are
    left out: the snippet lowers a float module."""
    from compare.measure.numerics import WEIGHT_ONLY
    from workloads import resolve_workloads

    found = {}
    for cell in results.cells:
        part, _, error = (cell.error or "").partition(": ")
        if cell.status != "failed" or part not in DECODE_PARTS or cell.dtype in WEIGHT_ONLY:
            continue
        (workload,) = resolve_workloads([cell.workload], results.config.get("workload_files", []))
        if not workload.params(cell.size).get("origin"):  # a hand-written decoder: no transformers model
            continue
        try:
            snippet = getattr(backend_class(cell.backend), "reproducer", None)
        except Exception:  # a backend no longer known here: no script
            snippet = None
        if snippet:
            path = f"reproducers/{coverage.slug(cell.label)}__{coverage.slug(cell.backend)}__{part}.py"
            found[(cell.label, cell.backend)] = {"part": part, "error": coverage.first_line(error), "path": path,
                                                 "cell": cell, "workload": workload}
    return found


def decode_script(cell, workload, entry: dict[str, Any], failure: dict[str, str], snippet: str, versions: dict,
                  lengths: tuple[int | None, int | None]) -> str:
    """The decoder as the cell built it (transformers' model from its config, seeded random
    weights, the decode suite's explicit-cache wrapper inlined), and the failing module alone."""
    import inspect

    from workloads.llm import with_lengths
    from workloads.nets import hf_decoder
    from workloads.zoo import sized_config

    workload = with_lengths(workload, *lengths)
    params = workload.params(cell.size)
    wrapper = [line for line in inspect.getsource(hf_decoder).splitlines() if line != "from __future__ import annotations"]
    config = {k: v for k, v in sized_config(entry, cell.size).items() if k != "architectures"}
    dtype = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}.get(cell.dtype)
    head = [f'"""Reproducer: the {failure["part"]} of {cell.label} through {cell.backend} (failed).', "",
            f"dlcompare saw: {failure['error']}", "",
            "Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())),
            f"Model: {workload.description}", '"""']
    build = [*TORCHVISION_GUARD, "import transformers", "", "torch.manual_seed(0)", "torch.set_num_threads(2)",
             f"config = transformers.AutoConfig.for_model(**{config!r})",
             f"cls = transformers.{entry['class']}",
             'attention = "sdpa" if getattr(cls, "_supports_sdpa", False) else "eager"',
             f"decoder = HFDecoder(cls._from_config(config, attn_implementation=attention).eval(), {params['max_len']})",
             *([f"decoder = decoder.to({dtype})"] if dtype else []),
             *input_code(workload.input_specs(cell.size))]
    if failure["part"] == "prefill":
        build += ["model = decoder.prefill_module().eval()"]
    else:  # the decode step's inputs as the generation feeds them: the prefill's caches and token
        build += ["with torch.no_grad():", "    logits, k_cache, v_cache = decoder.prefill_module()(*inputs)",
                  f"position = torch.tensor([{params['prompt']}], dtype=torch.int64)",
                  "inputs = [logits.argmax(-1, keepdim=True), position, k_cache, v_cache]",
                  "model = decoder.decode_module().eval()"]
    return "\n".join([*head, *wrapper, "", *build, "", snippet.rstrip(), ""])


def write_decode_reproducers(results: RunResults, run_dir: str | Path) -> list[str]:
    """A script per failed decode cell of a transformers decoder (``decode_failures``)."""
    versions = dict(results.environment.get("versions", {}))
    lengths = (results.config.get("prompt_len"), results.config.get("gen_len"))
    written = []
    for failure in decode_failures(results).values():
        cell, workload = failure["cell"], failure["workload"]
        entry = entry_of(workload, cell.size)
        if entry is None:
            continue
        text = decode_script(cell, workload, entry, failure, backend_class(cell.backend).reproducer, versions, lengths)
        atomic_write_text(Path(run_dir) / failure["path"], text)
        written.append(failure["path"])
    return written
