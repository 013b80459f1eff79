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

import json
import re
from pathlib import Path
from typing import Any

from ..base import TensorSpec, Workload, WorkloadError, lazy
from . import entry_names, entry_workload, load_entry

PREFIXES = ("hf", "timm", "torchvision", "pt2", "onnx")
TEXT_SEQ = 128  # tokens of a text model's input unless the entry says otherwise
IMAGE_SIDE = 224
VISION_TYPES = {"vit", "deit", "swin", "swinv2", "convnext", "convnextv2", "beit", "dinov2", "resnet", "regnet",
                "efficientnet", "mobilenet_v2", "mobilevit", "levit", "poolformer", "segformer", "dpt", "detr"}
WAVEFORM_TYPES = {"wav2vec2", "hubert", "wavlm", "data2vec-audio", "unispeech", "sew"}


def is_model_spec(text: str) -> bool:
    return bool(re.match(rf"^({'|'.join(PREFIXES)}):", str(text)))


def spec_workloads(spec: str) -> list[Workload]:
    """The workload a ``--model`` spec stands for (WorkloadError: one line, before anything runs)."""
    kind, _, rest = spec.partition(":")
    if not rest:
        raise WorkloadError(f"--model {spec}: give a name or path after '{kind}:'")
    if kind == "onnx":
        from .onnx_file import onnx_workload

        return [onnx_workload(spec, Path(rest).expanduser())]
    if kind == "pt2":
        return [pt2_workload(spec, Path(rest))]
    entry = spec_entry(spec)
    return [entry_workload(entry, spec, sizes=sizes_of(entry, spec)), *decode_workloads(entry, spec)]


def decode_workloads(entry: dict[str, Any], spec: str) -> list[Workload]:
    """A user's causal LM of a type the decode suite takes also generates (``NAME_decode``,
    run by ``--suite llm``), with the folder's own weights when it has them."""
    from ..llm import DECODE_MODEL_TYPES, HF_DECODERS, decode_workload, hf_decode_workload

    if spec.startswith("hf:") and spec[3:] in entry_names():  # a zoo entry: the decode suite's own, if it has one
        return [hf_decode_workload(name, zoo) for name, zoo in HF_DECODERS.items() if zoo == spec[3:]]
    if entry.get("family") != "decoder" or entry.get("config", {}).get("model_type") not in DECODE_MODEL_TYPES:
        return []
    return [decode_workload(f"{entry['name']}_decode", entry, spec, sizes_of(entry, spec))]


def sizes_of(entry: dict[str, Any], spec: str) -> tuple[str, ...]:
    """A zoo entry has its shrunk test size; a user's model runs as given."""
    return ("small", "default") if spec.startswith("hf:") and "small" in entry and "/" not in spec else ("default",)


def spec_entry(spec: str) -> dict[str, Any]:
    """The entry (the zoo's JSON shape) that a hf:, timm: or torchvision: spec stands for.
    The worker calls this again to build the model, so it must not depend on the parent."""
    kind, _, rest = spec.partition(":")
    if kind == "hf":
        return hf_entry(spec, rest)
    if kind == "timm":
        return vision_entry(spec, "timm", rest, timm_image_side(spec, rest))
    if kind == "torchvision":
        check_torchvision_name(spec, rest)
        return vision_entry(spec, "torchvision", rest, IMAGE_SIDE)
    raise WorkloadError(f"--model {spec}: unknown kind {kind!r} (known: {', '.join(PREFIXES)})")


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
    """A transformers config as a zoo entry: its first architecture, the inputs its type takes."""
    if "model_type" not in config:
        raise WorkloadError(f"--model {spec}: config has no model_type")
    classes = config.get("architectures") or []
    if not classes:
        raise WorkloadError(f"--model {spec}: config names no architectures (the transformers class to build)")
    cls, model_type = classes[0], config["model_type"]
    kind = ("image" if model_type in VISION_TYPES else "waveform" if model_type in WAVEFORM_TYPES
            else "mel" if model_type == "whisper" else "text2text" if config.get("is_encoder_decoder") else "text")
    inputs: dict[str, Any] = {"kind": kind}
    if kind in ("text", "text2text"):
        inputs.update(seq=TEXT_SEQ, **({"decoder_seq": 32} if kind == "text2text" else {}))
    elif kind == "image":
        inputs["image"] = int(config.get("image_size", IMAGE_SIDE)) if not isinstance(config.get("image_size"), list) \
            else int(config["image_size"][0])
    elif kind == "mel":
        inputs["frames"] = 2 * int(config.get("max_source_positions", 1500))
    else:
        inputs["samples"] = 16000
    heads = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration", "Classification")
    family = "vision" if kind == "image" else "speech" if kind in ("mel", "waveform") else \
        "encoder-decoder" if kind == "text2text" else "decoder" if cls.endswith(("ForCausalLM", "LMHeadModel")) else "encoder"
    name = re.sub(r"[^a-z0-9_]", "_", (Path(spec[3:]).parent.name if spec.endswith(".json") else Path(spec[3:]).name
                                       ).lower()) or model_type.replace("-", "_")
    return {"name": name, "title": f"{cls} from {spec[3:]}" + (" (its weights)" if weights_dir else " (seeded random weights)"),
            "family": family, "source": "hf", "class": cls, "config": config, "inputs": inputs,
            "output": "logits" if cls.endswith(heads) else "last_hidden_state", "weights": weights_dir}


def vision_entry(spec: str, source: str, name: str, side: int) -> dict[str, Any]:
    return {"name": re.sub(r"[^a-z0-9_]", "_", name.lower()), "title": f"{source} {name} (pretrained=False)",
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
