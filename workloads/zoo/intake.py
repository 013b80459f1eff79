"""``--model SPEC``: a model as a user brings it, made into a workload.

- ``hf:NAME``: a zoo entry (``hf:llama``); ``hf:PATH/config.json``: that config with seeded
  random weights; ``hf:DIR``: a local folder with ``config.json``, and its ``*.safetensors``
  weights when it has them;
- ``timm:NAME`` and ``torchvision:NAME``: ``pretrained=False`` / ``weights=None``;
- ``pt2:PATH``: a program saved with ``torch.export.save``; its inputs are the program's;
- ``onnx:PATH``: an ONNX file, for the backends with an ONNX frontend (``onnx_file``).

Nothing is fetched from the network: a name that would need a download (a Hub id such as
``hf:meta-llama/Llama-3.2-1B``, a pretrained tag) is a one-line error.
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from ..base import TensorSpec, Workload, WorkloadError, lazy
from . import entry_names, entry_workload, load_entry

PREFIXES = ("hf", "timm", "torchvision", "pt2", "onnx", "census")
IMAGE_SIDE = 224
NAMED = re.compile(rf"^([a-z][a-z0-9_]*)=((?:{'|'.join(PREFIXES)}):.*)$")  # NAME=kind:...


def is_model_spec(text: str) -> bool:
    return bool(re.match(rf"^({'|'.join(PREFIXES)}):", split_name(str(text))[1]))


def spec_workloads(spec: str) -> list[Workload]:
    """The workload a ``--model`` spec stands for (WorkloadError: one line, before anything runs)."""
    given, bare = split_name(spec)
    kind, _, rest = bare.partition(":")
    if not rest:
        raise WorkloadError(f"--model {spec}: give a name or path after '{kind}:'")
    if kind == "onnx":
        from .onnx_file import onnx_workload

        return [renamed(onnx_workload(spec, Path(rest).expanduser()), given)]
    if kind == "pt2":
        return [renamed(pt2_workload(spec, Path(rest)), given)]
    entry = spec_entry(spec)
    return [entry_workload(entry, spec, sizes=SIZES), *decode_workloads(entry, spec)]


def renamed(workload: Workload, name: str | None) -> Workload:
    return workload if name is None else dataclasses.replace(workload, name=name)


def decode_workloads(entry: dict[str, Any], spec: str) -> list[Workload]:
    """A user's causal LM of a type the decode suite takes also generates (``NAME_decode``,
    run by ``--suite llm``), with the folder's own weights when it has them."""
    from ..llm import DECODE_MODEL_TYPES, HF_DECODERS, decode_workload, hf_decode_workload

    path = spec_path(spec)
    takes = entry.get("family") == "decoder" and entry.get("config", {}).get("model_type") in DECODE_MODEL_TYPES
    own = [hf_decode_workload(name, zoo) for name, zoo in HF_DECODERS.items() if zoo == path]
    if own:  # a zoo entry the decode suite has as its own
        return own
    # any other (a user's folder, the zoo's MoE decoders) with the spec as its source, so that a
    # worker finds it again through the run's --model specs
    return [decode_workload(f"{entry['name']}_decode", entry, spec, SIZES)] if takes else []


# Every --size: a zoo entry at its shrunk test size or published size; a user's model as
# given at both (its entry has no "small"), so that it runs beside the zoo at either.
SIZES = ("small", "default")


def spec_entry(spec: str) -> dict[str, Any]:
    """The entry (the zoo's JSON shape) that a hf:, timm: or torchvision: spec stands for.
    The worker calls this again to build the model, so it must not depend on the parent."""
    given, bare = split_name(spec)
    kind, _, rest = bare.partition(":")
    if kind == "hf":
        entry = hf_entry(spec, rest)
    elif kind == "timm":
        entry = vision_entry(spec, "timm", rest, timm_image_side(spec, rest))
    elif kind == "torchvision":
        check_torchvision_name(spec, rest)
        entry = vision_entry(spec, "torchvision", rest, IMAGE_SIDE)
    else:
        raise WorkloadError(f"--model {spec}: unknown kind {kind!r} (known: {', '.join(PREFIXES)})")
    return {**entry, "name": given} if given else entry


def hf_entry(spec: str, rest: str) -> dict[str, Any]:
    if rest in entry_names():
        return load_entry(rest)
    path = Path(rest).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise WorkloadError(f"--model {spec}: the folder has no config.json")
        weights = sorted(str(p) for p in path.glob("*.safetensors"))
        return config_entry(spec, json.loads((path / "config.json").read_text()), str(path) if weights else None)
    if path.is_file():
        try:
            config = json.loads(path.read_text())
        except ValueError as exc:
            raise WorkloadError(f"--model {spec}: not a JSON config ({exc})") from None
        return config_entry(spec, config, None)
    raise WorkloadError(f"--model {spec}: not a zoo entry ({', '.join(entry_names())}), a config.json or a local folder; "
                        "dlcompare never downloads a model, so give the folder or config of one you have")


def config_entry(spec: str, config: dict[str, Any], weights_dir: str | None) -> dict[str, Any]:
    """A transformers config as a zoo entry: the class it names (else its AutoModel class),
    and the inputs and output that class declares (``hf_class``)."""
    from .hf_class import describe

    if "model_type" not in config:
        raise WorkloadError(f"--model {spec}: config has no model_type")
    declared = describe(spec, config)
    path = spec_path(spec)
    return {"name": default_name(path, config["model_type"]),
            "title": f"{declared['class']} from {path}" + (" (its weights" if weights_dir else " (seeded random weights")
            + ", as given at every --size)",
            "source": "hf", "config": config, "weights": weights_dir, **declared}


def default_name(path: str, fallback: str) -> str:
    """A user's model is named after its file (``cfgs/a.json``: ``a``), or its folder when
    the file is a ``config.json`` or the spec a folder (``NAME=`` in the spec: ``spec_entry``)."""
    where = Path(path)
    stem = where.parent.name if where.name == "config.json" else where.stem if where.suffix == ".json" else where.name
    return re.sub(r"[^a-z0-9_]", "_", stem.lower()) or re.sub(r"[^a-z0-9_]", "_", fallback.lower())


def split_name(spec: str) -> tuple[str | None, str]:
    """``NAME=kind:...`` as (NAME, ``kind:...``); a spec without a name as (None, spec)."""
    match = NAMED.match(str(spec))
    return (match.group(1), match.group(2)) if match else (None, str(spec))


def spec_path(spec: str) -> str:
    """What follows ``kind:`` in the spec, its ``NAME=`` left out."""
    return split_name(spec)[1].partition(":")[2]


def vision_entry(spec: str, source: str, name: str, side: int) -> dict[str, Any]:
    return {"name": re.sub(r"[^a-z0-9_]", "_", name.lower()), "title": f"{source} {name} (pretrained=False, as given at every --size)",
            "family": "vision", "source": source, "model": name, "inputs": {"kind": "image", "image": side},
            "output": None}


def timm_image_side(spec: str, name: str) -> int:
    try:
        from . import import_torchvision

        import_torchvision()  # timm imports it
        import timm
    except ImportError:
        raise WorkloadError(f"--model {spec}: timm is not installed (pip install -e '.[zoo]')") from None
    if ".".join(name.split(".")[1:]) or not timm.is_model(name):
        raise WorkloadError(f"--model {spec}: timm has no model {name!r} (a pretrained tag would need a download)")
    cfg = timm.models.get_pretrained_cfg(name)
    size = getattr(cfg, "input_size", None) if cfg is not None else None
    return int(size[-1]) if size else IMAGE_SIDE


def check_torchvision_name(spec: str, name: str) -> None:
    from . import import_torchvision

    try:
        torchvision = import_torchvision()
    except ImportError:
        raise WorkloadError(f"--model {spec}: torchvision is not installed (pip install -e '.[zoo]')") from None
    if name not in torchvision.models.list_models():
        raise WorkloadError(f"--model {spec}: torchvision has no model {name!r}")


def pt2_workload(spec: str, path: Path) -> Workload:
    """A saved torch.export program: its user inputs' shapes and dtypes, seeded anew."""
    if not path.is_file():
        raise WorkloadError(f"--model {spec}: no such file")
    import torch

    try:
        program = torch.export.load(str(path))
    except Exception as exc:  # a file torch.export cannot read: the user's input, one line
        raise WorkloadError(f"--model {spec}: torch.export.load failed: {str(exc).splitlines()[0][:200]}") from None
    specs = []
    for i, value in enumerate(program_inputs(program)):
        dtype = str(value.dtype).removeprefix("torch.")
        init = "randn" if value.dtype.is_floating_point else "randint:2"
        specs.append(TensorSpec(tuple(int(d) for d in value.shape), dtype, name=f"input{i}", init=init))
    params = {"origin": spec, "size": "default", "inputs": [s.to_dict() for s in specs]}
    return Workload(name=re.sub(r"[^a-z0-9_]", "_", path.stem.lower()) or "pt2",
                    description=f"torch.export program {path.name}; called with its {len(specs)} user inputs",
                    sizes={"default": params}, build=lazy("zoo.build", "build_model"),
                    inputs=lambda p: [TensorSpec(tuple(s["shape"]), s["dtype"], name=s["name"], init=s["init"])
                                      for s in p["inputs"]],
                    tags=("zoo", "pt2"), source=spec)


def program_inputs(program) -> list:
    """The fake tensors of the program's user inputs, in call order."""
    user = set(program.graph_signature.user_inputs)
    return [node.meta["val"] for node in program.graph.nodes if node.op == "placeholder" and node.name in user]
