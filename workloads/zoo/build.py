"""The zoo's models, built in the worker: transformers from configs, timm and torchvision
without pretrained weights, saved torch.export programs. Imported by ``build_model`` only."""
from __future__ import annotations

import inspect
import tempfile
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from . import ENCODER_ONLY, import_torchvision, input_names, load_entry, offline_imports, size_params, sized_config
from .onnx_file import REFERENCE, input_specs

ATTENTION = "sdpa"  # transformers' default attention on CPU, named so every backend gets the same graph


class Called(nn.Module):
    """The model called as real inference calls it: keyword inputs by name, one output
    (a ModelOutput field or a dict key; a tensor as it is)."""

    def __init__(self, model: nn.Module, names: list[str] | None, output: str | None, extra: Mapping[str, Any],
                 prompt_prefix: list[int] | None = None):
        super().__init__()
        self.model, self.names, self.output, self.extra = model, names, output, dict(extra)
        # A VLM's image placeholder tokens (``image_prompt``), put before the text ids as its
        # processor puts them where the prompt names an image.
        if prompt_prefix:
            self.register_buffer("prefix", torch.tensor(prompt_prefix, dtype=torch.long), persistent=False)
        else:
            self.prefix = None

    def forward(self, *tensors):
        if self.names is None:  # timm and torchvision take the image positionally
            out = self.model(*tensors)
        else:
            inputs = dict(zip(self.names, tensors))
            if self.prefix is not None:
                ids = inputs["input_ids"]
                inputs["input_ids"] = torch.cat([self.prefix.expand(ids.shape[0], -1), ids], dim=1)
                if "attention_mask" in inputs:
                    mask = inputs["attention_mask"]
                    inputs["attention_mask"] = torch.cat([mask.new_ones(mask.shape[0], self.prefix.numel()), mask], 1)
            out = self.model(**inputs, **self.extra)
        if self.output is None:
            return out
        return out[self.output] if isinstance(out, dict) else getattr(out, self.output)


class Program(nn.Module):
    """A saved torch.export program as a module: its mode was fixed when it was exported
    (its own ``eval()`` raises), so ``train``/``eval`` leave it as it is."""

    def __init__(self, program: nn.Module):
        super().__init__()
        self.program = program

    def train(self, mode: bool = True) -> "Program":
        self.training = mode
        return self

    def forward(self, *tensors):
        return self.program(*tensors)


def build_model(params: Mapping[str, Any]) -> nn.Module:
    """The workload's module: the entry behind ``params['origin']`` at ``params['size']``."""
    offline_imports()
    origin = params["origin"]
    if origin.startswith("pt2:"):
        return Program(torch.export.load(origin[4:]).module())
    if origin.startswith("zoo:"):
        entry = load_entry(origin[4:])
    else:
        from .intake import spec_entry

        entry = spec_entry(origin)
    return entry_model(entry, params["size"])


def entry_model(entry: Mapping[str, Any], size: str) -> nn.Module:
    """A zoo entry's model at ``size``, called as ``Called`` calls it."""
    model = {"hf": hf_model, "timm": timm_model, "torchvision": torchvision_model}[entry["source"]](entry, size)
    names = [name for name, _ in input_names(entry["inputs"]["kind"])] if entry["source"] == "hf" else None
    accepted = inspect.signature(model.forward).parameters
    extra: dict[str, Any] = {"use_cache": False} if "use_cache" in accepted else {}
    if entry["inputs"]["kind"] != "text_image":
        return Called(model.eval(), names, entry.get("output"), extra)
    constants = {k: torch.tensor(v) for k, v in entry["inputs"].get("image_extra", {}).items() if k in accepted}
    prefix, token, note = image_prompt(model.eval(), entry, size, constants)
    if prefix and "mm_token_type_ids" in accepted:  # which tokens are the image's (1), for M-RoPE
        types = [int(t == token) for t in prefix] + [0] * int(size_params(entry, size, "image_prompt")["seq"])
        constants["mm_token_type_ids"] = torch.tensor([types], dtype=torch.int32)
    called = Called(model, names, entry.get("output"), {**extra, **constants}, prefix)
    called.build_note = note
    return called


def image_prompt(model: nn.Module, entry: Mapping[str, Any], size: str,
                 constants: Mapping[str, torch.Tensor]) -> tuple[list[int], int | None, str]:
    """A VLM's prompt prefix: as many image placeholder tokens as its vision tower gives
    features for the workload's pixels (``get_image_features``, counted as the model counts
    them: elements over the feature width), between the vision start/end tokens where the
    config has them; the placeholder's id; and a note saying so. No prefix where the model
    has no such call or token: its forward then fails with its own error."""
    from workloads import make_inputs

    from . import entry_workload

    config = model.config
    token = next((getattr(config, k) for k in ("image_token_id", "image_token_index")
                  if isinstance(getattr(config, k, None), int)), None)
    features_of = getattr(model, "get_image_features", None)
    if token is None or features_of is None:
        return [], None, "no image placeholder tokens: the config names no image token or the model no get_image_features"
    specs = entry_workload(entry, "image_prompt").input_specs(size)
    pixels = next(t for s, t in zip(specs, make_inputs(specs)) if s.name == "pixel_values")
    taken = inspect.signature(features_of).parameters
    with torch.no_grad():
        out = features_of(pixel_values=pixels, **{k: v for k, v in constants.items() if k in taken})
    features = getattr(out, "pooler_output", None) if not isinstance(out, (torch.Tensor, list, tuple)) else out
    parts = [features] if isinstance(features, torch.Tensor) else list(features or [])
    count = sum(f.numel() // f.shape[-1] for f in parts)
    start, end = (getattr(config, k, None) for k in ("vision_start_token_id", "vision_end_token_id"))
    wrap = isinstance(start, int) and isinstance(end, int)
    prefix = ([start] if wrap else []) + [token] * count + ([end] if wrap else [])
    extras = ", ".join(constants) or "none"
    note = (f"prompt: {count} image placeholder tokens (id {token}{', between vision start/end' if wrap else ''}) "
            f"before the text ids; pixels in the layout of {entry['inputs'].get('image_processor') or 'the config'}, "
            f"constants beside them: {extras}")
    return prefix, token, note


def parameter_count(entry: Mapping[str, Any], size: str) -> int:
    """How many parameters a transformers entry's model has, counted on the meta device
    (nothing allocated)."""
    with torch.device("meta"):
        return sum(p.numel() for p in hf_model(entry, size).parameters())


def hf_decoder(params: Mapping[str, Any]) -> nn.Module:
    """A decode-suite workload's model (workloads/llm.py): the entry's causal LM with its
    prefill and decode-step modules over a static cache of ``max_len`` slots."""
    from ..nets.hf_decoder import HFDecoder
    from .intake import spec_entry

    offline_imports()
    origin = params["origin"]
    entry = load_entry(origin[4:]) if origin.startswith("zoo:") else spec_entry(origin)
    return HFDecoder(hf_model(entry, params["size"]).eval(), int(params["max_len"]))


def hf_model(entry: Mapping[str, Any], size: str) -> nn.Module:
    import transformers

    cls = getattr(transformers, entry["class"], None)
    if cls is None:
        raise ValueError(f"transformers {transformers.__version__} has no class {entry['class']!r}")
    # SDPA where the class has it, else its own attention (DeBERTa-v2 has no SDPA path).
    attention = ATTENTION if getattr(cls, "_supports_sdpa", False) else "eager"
    if entry.get("weights"):
        return cls.from_pretrained(entry["weights"], local_files_only=True, attn_implementation=attention)
    config = dict(sized_config(entry, size))
    config.pop("architectures", None)
    config = transformers.AutoConfig.for_model(**config)
    try:
        model = cls._from_config(config, attn_implementation=attention)
    except ValueError as exc:  # a part without SDPA (a vision backbone): the model's own attention
        if attention == "eager" or "attention implementation" not in str(exc):
            raise
        model = cls._from_config(config, attn_implementation="eager")
    return model.get_encoder() if entry["class"] in ENCODER_ONLY else model


def timm_model(entry: Mapping[str, Any], size: str) -> nn.Module:
    import_torchvision()  # timm imports torchvision's transforms
    import timm

    return timm.create_model(sized_config(entry, size)["model"], pretrained=False)


def torchvision_model(entry: Mapping[str, Any], size: str) -> nn.Module:
    models = import_torchvision().models
    name = sized_config(entry, size)["model"]
    builder = models.get_model_builder(name)
    # Segmentation and detection builders load ImageNet backbone weights by default: not here.
    kwargs = {"weights_backbone": None} if "weights_backbone" in inspect.signature(builder).parameters else {}
    model = builder(weights=None, **kwargs)
    if hasattr(model, "aux_classifier"):
        model.aux_classifier = None
    return model


def build_onnx(params: Mapping[str, Any]) -> "OnnxFile":
    """``--model onnx:PATH`` (workloads.zoo.onnx_file)."""
    return OnnxFile(Path(params["path"]), {s.name: s.shape for s in input_specs(params)})


def static_copy(path: Path, shapes: Mapping[str, tuple[int, ...]]) -> Path:
    """The file with its inputs' symbolic dims set to ``shapes`` (shapes inferred through the
    graph again), in a temporary folder of this process: every backend reads the same graph."""
    import onnx

    model = onnx.load(str(path))  # external data too: the copy is self-contained
    for value in model.graph.input:
        if value.name in shapes:
            for dim, size in zip(value.type.tensor_type.shape.dim, shapes[value.name]):
                dim.Clear()
                dim.dim_value = size
    folder = Path(tempfile.mkdtemp(prefix="dlcompare-onnx-"))
    out = folder / "model.onnx"
    large = model.ByteSize() > 1_900_000_000  # protobuf's 2 GB cap: weights go beside it
    onnx.save(model, str(out), save_as_external_data=large, location="model.onnx.data" if large else None)
    onnx.shape_inference.infer_shapes_path(str(out), str(out))
    return out


class OnnxFile(nn.Module):
    """An ONNX file as a module: ``onnx_path`` is what the ONNX-frontend backends lower;
    calling it is the reference, the file run op by op by ONNX Runtime."""

    reference = REFERENCE

    def __init__(self, source: Path, shapes: Mapping[str, tuple[int, ...]]):
        super().__init__()
        self.source = source
        self.onnx_path = static_copy(source, shapes)
        self.input_names = list(shapes)
        self._session = None

    def forward(self, *tensors: torch.Tensor):
        if self._session is None:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            options.intra_op_num_threads = torch.get_num_threads()  # the run's threads, as every backend's
            options.inter_op_num_threads = 1
            self._session = ort.InferenceSession(str(self.onnx_path), sess_options=options,
                                                 providers=["CPUExecutionProvider"])
        feed = {name: t.detach().cpu().numpy() for name, t in zip(self.input_names, tensors)}
        outputs = [torch.from_numpy(o) for o in self._session.run(None, feed)]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)
