"""Real architectures as users bring them: the zoo suite and ``--model`` specs.

A zoo entry is a small JSON file in ``configs/`` that names a transformers, timm or
torchvision architecture at its published size, with a shrunk ``small`` size for tests,
the inputs its forward expects and the output the benchmark returns. Weights are seeded
random: nothing is downloaded, ever. Defining the workloads reads JSON only; torch and
the model libraries are imported in the worker (``workloads.zoo.build``).

Every model is called as real inference calls it, the same call for every backend:
keyword inputs by name (a text model gets ``input_ids`` *and* an all-ones
``attention_mask``), no KV cache returned (``use_cache=False``), one output tensor, with
transformers' SDPA attention where the class has it (else its own: DeBERTa-v2).
"""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Mapping

from ..base import TensorSpec, Workload, WorkloadError, lazy

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
KINDS = ("text", "text2text", "image", "mel", "mel2text", "waveform", "waveform2text", "text_image")
# Classes the zoo builds as their encoder alone (build.hf_model): fed no decoder input.
ENCODER_ONLY = ("WhisperModel",)


def guard_torchvision(torch_version: str) -> bool:
    """Make torchvision importable beside a CPU torch, before anything imports it.

    The registry's torchvision 0.28.0 is a CUDA build: its C++ ops (nms, roi_align) cannot
    load beside torch 2.13.0+cpu, and its import then fails registering their fake kernels
    ("operator torchvision::nms does not exist"), which takes transformers and timm down
    with it. The models need none of those ops: stand in for that registration module, so
    classification and segmentation models build (a detection model's nms raises when
    called). The logic is ``dlcompare_torchvision_guard.apply`` (the repository root's
    module), which an installed dlcompare's .pth runs in every interpreter of the venv
    already; this call covers a worker run from a checkout without it (PYTHONPATH). Reads
    torchvision's version file only; True when the stand-in is in place."""
    import dlcompare_torchvision_guard

    return dlcompare_torchvision_guard.apply(torch_version)


def import_torchvision():
    """torchvision, importable beside the CPU torch (``guard_torchvision``)."""
    import torch

    guard_torchvision(torch.__version__)
    import torchvision

    return torchvision


# Nothing is downloaded at run time: every library that could reach a hub is told so.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def offline_imports() -> None:
    """Nothing may download; torchvision made importable before transformers and timm,
    which import it when it is there."""
    os.environ.update(OFFLINE_ENV)
    with contextlib.suppress(ImportError):
        import_torchvision()


def entry_names() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


def load_entry(name: str) -> dict[str, Any]:
    path = CONFIG_DIR / f"{name}.json"
    if not path.is_file():
        raise WorkloadError(f"no zoo entry {name!r} (known: {', '.join(entry_names())})")
    return json.loads(path.read_text())


def sized_config(entry: Mapping[str, Any], size: str) -> dict[str, Any]:
    """The entry's model config (hf) or model name (timm, torchvision) at ``size``."""
    small = size == "small"
    if entry["source"] == "hf":
        return {**entry["config"], **(entry.get("small", {}) if small else {})}
    return {"model": (entry.get("small") or {}).get("model", entry["model"]) if small else entry["model"]}


def call_text(entry: Mapping[str, Any]) -> str:
    """How the model is called, stated in the workload's description and in every table."""
    names = ", ".join(name for name, _ in input_names(entry["inputs"]["kind"]))
    what = "encoder" if entry.get("class") in ENCODER_ONLY else entry.get("class") or entry.get("model")
    extra = ", use_cache=False" if entry.get("family") in ("decoder", "encoder-decoder") else ""
    output = f".{entry['output']}" if entry.get("output") else ""
    if entry.get("output_class"):  # read from the class (hf_class): say where it came from
        output += f" (the first field of {entry['output_class']})"
    return f"{what}({names}{extra}){output}"


def input_names(kind: str) -> list[tuple[str, str]]:
    """(name, role) of each input the forward takes, in call order."""
    return {"text": [("input_ids", "ids"), ("attention_mask", "mask")],
            "text2text": [("input_ids", "ids"), ("attention_mask", "mask"), ("decoder_input_ids", "decoder_ids")],
            "mel2text": [("input_features", "mel"), ("decoder_input_ids", "decoder_ids")],
            "image": [("pixel_values", "image")],
            "text_image": [("input_ids", "ids"), ("attention_mask", "mask"), ("pixel_values", "image")],
            "mel": [("input_features", "mel")],
            "waveform": [("input_values", "waveform")],
            "waveform2text": [("input_values", "waveform"), ("decoder_input_ids", "decoder_ids")]}[kind]


def roles(kind: str) -> set[str]:
    """What a kind's inputs are (``ids``, ``image``, ``mel``...): which sizes it needs."""
    return {role for _, role in input_names(kind)}


def input_specs(params: Mapping[str, Any]) -> list[TensorSpec]:
    """The seeded inputs at one size: token ids below the vocabulary, an all-ones mask."""
    b, kind = params["batch"], params["kind"]
    shapes = {"ids": ((b, params.get("seq", 0)), "int64", f"randint:{params.get('vocab', 2)}"),
              "mask": ((b, params.get("seq", 0)), "int64", "ones"),
              "decoder_ids": ((b, params.get("decoder_seq", 0)), "int64", f"randint:{params.get('vocab', 2)}"),
              "image": (pixel_shape(params), "float32", "randn"),
              "mel": ((b, *(params.get("features") or (params.get("mel_bins", 0), params.get("frames", 0)))), "float32",
                      "randn"),
              "waveform": ((b, params.get("samples", 0)), "float32", "randn")}
    specs = []
    for name, role in input_names(kind):
        shape, dtype, init = shapes[role]
        specs.append(TensorSpec(shape, dtype, name=name, init=init))
    return specs


def pixel_shape(params: Mapping[str, Any]) -> tuple[int, ...]:
    """The pixels' shape: the image processor's layout where intake read one (a VLM's
    patches or tiles, batch 1), else batch, [frames,] channels, side, side."""
    if params.get("pixel_shape"):
        return tuple(params["pixel_shape"])
    frames = [params["video_frames"]] if params.get("video_frames") else []
    return (params["batch"], *frames, params.get("channels", 3), params.get("image", 0), params.get("image", 0))


def size_params(entry: Mapping[str, Any], size: str, origin: str) -> dict[str, Any]:
    """The workload's parameters at ``size``: where the entry is, the inputs, batch 1."""
    inputs = {**entry["inputs"], **(entry.get("inputs_small", {}) if size == "small" else {})}
    if inputs.get("kind") not in KINDS:
        raise WorkloadError(f"zoo entry {entry.get('name')!r}: inputs.kind must be one of {', '.join(KINDS)}")
    config = sized_config(entry, size)
    params: dict[str, Any] = {"origin": origin, "size": size, "batch": 1, **inputs}
    taken = roles(inputs["kind"])
    if taken & {"ids", "decoder_ids"} and "vocab" not in inputs:
        params["vocab"] = int(config["vocab_size"])
    if "mel" in taken and "mel_bins" not in inputs:
        params["mel_bins"] = int(config.get("num_mel_bins", 80))
    return params


def entry_workload(entry: Mapping[str, Any], origin: str, sizes: tuple[str, ...] = ("small", "default")) -> Workload:
    """A Workload for a zoo entry (``origin``: ``zoo:<name>``, or the path of a user's entry)."""
    for key in ("name", "title", "source", "inputs"):
        if key not in entry:
            raise WorkloadError(f"model entry {origin}: missing field {key!r}")
    return Workload(
        name=entry["name"],
        description=f"{entry['title']}; called as {call_text(entry)}",
        sizes={size: size_params(entry, size, origin) for size in sizes},
        build=lazy("zoo.build", "build_model"),
        inputs=input_specs,
        tags=("zoo", entry.get("family", "model")),
        source=origin,
        batch_param="batch",
    )


def zoo_workloads() -> list[Workload]:
    return [entry_workload(load_entry(name), f"zoo:{name}") for name in entry_names()]
