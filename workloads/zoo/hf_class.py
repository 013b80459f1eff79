"""What a transformers model class declares, read by transformers' own introspection: the
class a config builds, its inputs (``main_input_name`` and the forward's parameters), the
sizes of those inputs (the config, with transformers' defaults where a field is absent)
and the output it returns (the first field of the forward's output dataclass).

Used by ``--model hf:`` for a user's config; the zoo's entries state the same by hand."""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import typing
from typing import Any

from ..base import WorkloadError

TEXT_SEQ = 128  # tokens of a text model's input
DECODER_SEQ = 32  # decoder tokens of an encoder-decoder
IMAGE_SIDE = 224  # an image model whose config names no image size
WAVEFORM_SAMPLES = 16000  # one second at 16 kHz
# The input each main input name stands for (workloads.zoo.input_names).
KIND_OF_MAIN_INPUT = {"input_ids": "text", "pixel_values": "image", "input_features": "mel", "input_values": "waveform"}


def transformers_module():
    from . import offline_imports

    offline_imports()  # offline, and torchvision importable beside the CPU torch
    import transformers

    return transformers


@contextlib.contextmanager
def quiet_imports():
    """The warnings transformers' lazy imports log (torchao's CUDA libraries, torch's
    pytree) are not the user's concern, and would bury a one-line error."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


def config_object(spec: str, config: dict[str, Any]):
    """The config as transformers builds it: every field the file leaves out at its default."""
    transformers = transformers_module()
    fields = {k: v for k, v in config.items() if k != "architectures"}
    try:
        return transformers.AutoConfig.for_model(**fields)
    except Exception as exc:  # the user's file: one line
        raise WorkloadError(f"--model {spec}: transformers cannot build this config: "
                            f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}") from None


def model_class(spec: str, config: dict[str, Any], cfg) -> type:
    """The config's first ``architectures`` entry, else the base model its type maps to."""
    transformers = transformers_module()
    named = (config.get("architectures") or [None])[0]
    if named:
        cls = getattr(transformers, named, None)
        if cls is None:
            raise WorkloadError(f"--model {spec}: transformers {transformers.__version__} has no class {named!r}")
        return cls
    from transformers.models.auto import modeling_auto

    try:
        return modeling_auto.MODEL_MAPPING[type(cfg)]
    except KeyError:
        raise WorkloadError(f"--model {spec}: config type {cfg.model_type!r} has no AutoModel class; "
                            "name one in the config's architectures") from None


def output_field(cls: type) -> tuple[str | None, str | None]:
    """(field, dataclass) of what the forward returns: the first field of its output
    dataclass that is not a loss (``loss``, an MoE's ``aux_loss``): ``logits``,
    ``last_hidden_state``, ``pred_masks``..."""
    annotation = inspect.signature(cls.forward).return_annotation
    for candidate in (annotation, *typing.get_args(annotation)):
        if inspect.isclass(candidate) and dataclasses.is_dataclass(candidate):
            names = [f.name for f in dataclasses.fields(candidate) if not f.name.endswith("loss")]
            if names:
                return names[0], candidate.__name__
    return None, None


def sub_config(cfg, name: str):
    """A composite config's part (``vision_config``, ``audio_config``), or the config itself."""
    return getattr(cfg, name, None) or cfg


def inputs_of(spec: str, cls: type, cfg) -> dict[str, Any]:
    """The entry's ``inputs``: which the forward takes and their sizes."""
    main = getattr(cls, "main_input_name", "input_ids")
    kind = KIND_OF_MAIN_INPUT.get(main)
    if kind is None:
        raise WorkloadError(f"--model {spec}: {cls.__name__} takes {main!r} first; dlcompare feeds input_ids, "
                            f"pixel_values, input_features or input_values")
    from . import ENCODER_ONLY, roles

    accepted = inspect.signature(cls.forward).parameters
    if kind in ("text", "mel", "waveform") and getattr(cfg, "is_encoder_decoder", False) and "decoder_input_ids" in accepted \
            and cls.__name__ not in ENCODER_ONLY:
        kind = kind + "2text"  # a speech-to-text model's decoder is given its first tokens too
    if kind == "text" and "pixel_values" in accepted and getattr(cfg, "vision_config", None) is not None:
        kind = "text_image"
    inputs: dict[str, Any] = {"kind": kind, "main_input_name": main}
    taken = roles(kind)
    if taken & {"ids", "decoder_ids"}:
        vocab = getattr(cfg.get_text_config(), "vocab_size", None) or getattr(cfg, "vocab_size", None)
        if not vocab:
            raise WorkloadError(f"--model {spec}: the config has no vocab_size for {main!r}")
        positions = getattr(cfg.get_text_config(), "max_position_embeddings", None) or TEXT_SEQ
        inputs.update(seq=min(TEXT_SEQ, int(positions)), vocab=int(vocab))
        if kind == "text_image":  # text ids stay below the image's special tokens (the prompt adds those)
            inputs["vocab"] = min([int(vocab), *special_token_ids(cfg)])
        if "decoder_ids" in taken:
            inputs["decoder_seq"] = DECODER_SEQ
    if "image" in taken:
        inputs.update(image_inputs(cfg, kind))
    if "mel" in taken:
        inputs.update(mel_bins=int(getattr(cfg, "num_mel_bins", 80)),
                      frames=2 * int(getattr(cfg, "max_source_positions", 1500)))
        features = feature_shape(cfg)
        if features:
            inputs["features"] = features
    if "waveform" in taken:
        inputs["samples"] = WAVEFORM_SAMPLES
    return inputs


def image_inputs(cfg, kind: str) -> dict[str, Any]:
    """The image's side and channels (of ``vision_config`` where there is one), a video
    model's frames, a vision-language model's layout from its processor."""
    vision = sub_config(cfg, "vision_config")
    side = getattr(vision, "image_size", None) or IMAGE_SIDE
    inputs = {"image": int(side[0] if isinstance(side, (list, tuple)) else side),
              "channels": int(getattr(vision, "num_channels", 3) or 3)}
    # A video model's config says how many frames a clip has: its pixel_values are 5-D.
    frames = getattr(cfg, "num_frames", None) or getattr(vision, "num_frames", None)
    if kind == "image" and isinstance(frames, int) and frames > 0:
        inputs["video_frames"] = frames
    if kind == "text_image":
        inputs.update(processed_image(cfg, inputs["image"]))
    return inputs


SPECIAL_TOKEN_FLOOR = 100  # ids below this are bos/eos/pad: harmless in a random prompt
IMAGE_CONSTANT_MAX = 1024  # elements: a processor's tensor beside the pixels kept as a constant


def token_ids(*parts: dict[str, Any]) -> list[int]:
    """The token ids (``*_token_id``, ``*_token_index``) that config dicts name at their top level."""
    return [v for part in parts for k, v in part.items()
            if k.endswith(("_token_id", "_token_index")) and isinstance(v, int) and not isinstance(v, bool)]


def special_token_ids(cfg) -> list[int]:
    """The config's special token ids above the first few (image, video, vision start/end...),
    which a random text prompt must not hold: the model counts its image placeholders."""
    return [v for v in token_ids(cfg.to_dict(), cfg.get_text_config().to_dict()) if v >= SPECIAL_TOKEN_FLOOR]


def processed_image(cfg, side: int) -> dict[str, Any]:
    """What the model type's own image processor makes of one blank ``side`` x ``side``
    image: the pixel layout it feeds the model (``pixel_shape``: Qwen2-VL's flattened patches,
    LLaVA-NeXT's tiles) and the small tensors it passes beside them (``image_extra``:
    ``image_grid_thw``, ``image_sizes``), which the model reads as constants. Empty where
    transformers names no processor for the type or it cannot run here: the config's layout."""
    import numpy as np
    from transformers.models.auto import image_processing_auto

    transformers = transformers_module()
    names = image_processing_auto.IMAGE_PROCESSOR_MAPPING_NAMES.get(getattr(cfg, "model_type", "")) or {}
    names = list(names.values()) if isinstance(names, dict) else [n for n in names if n]
    image = np.zeros((side, side, 3), dtype=np.uint8)
    for name in names:
        try:
            with quiet_imports():
                processor = getattr(transformers, name)()
                out = processor(images=image, return_tensors="pt")
                # Its defaults are a checkpoint's, not this config's: keep the config's side.
                if not fits(out["pixel_values"], side):
                    out = processor(images=image, return_tensors="pt", do_resize=False, do_center_crop=False)
            if not fits(out["pixel_values"], side):
                continue
        except Exception:  # noqa: BLE001 - a processor that cannot run here leaves the config's layout
            continue
        extra = {key: value.tolist() for key, value in out.items()
                 if key != "pixel_values" and hasattr(value, "numel") and value.numel() <= IMAGE_CONSTANT_MAX}
        return {"pixel_shape": list(out["pixel_values"].shape), "image_extra": extra, "image_processor": name}
    return {}


def fits(pixels, side: int) -> bool:
    """Whether a processor's pixels match the config's image side: patches (2-D, Qwen2-VL)
    are sized by the config's patch, an image or its tiles end in side x side."""
    if not hasattr(pixels, "ndim"):  # a list of differently sized images: not a layout to feed
        return False
    return pixels.ndim < 4 or tuple(pixels.shape[-2:]) == (side, side)


FEATURE_AUDIO_S = 2.0  # seconds of silence the feature extractor is asked to describe


def feature_shape(cfg) -> list[int] | None:
    """The ``input_features`` shape, less the batch, that the model type's own feature
    extractor makes of ``FEATURE_AUDIO_S`` of audio: which axis holds the mel bins differs
    (Whisper: bins then frames; Parakeet, Speech2Text: frames then bins). None where
    transformers names no extractor or it cannot run here (one needs torchaudio)."""
    import numpy as np
    from transformers.models.auto import feature_extraction_auto

    transformers = transformers_module()
    name = feature_extraction_auto.FEATURE_EXTRACTOR_MAPPING_NAMES.get(getattr(cfg, "model_type", ""))
    try:
        extractor = getattr(transformers, name)()
        rate = int(getattr(extractor, "sampling_rate", 16000))
        with np.errstate(all="ignore"):
            out = extractor(np.zeros(int(rate * FEATURE_AUDIO_S), dtype=np.float32), sampling_rate=rate,
                            return_tensors="pt")
        shape = list(out["input_features"].shape)
    except Exception:  # noqa: BLE001 - any extractor that cannot run leaves the default layout
        return None
    return shape[1:] if len(shape) == 3 else None


def family_of(cls: type, kind: str) -> str:
    from . import roles

    if kind in ("image",):
        return "vision"
    if roles(kind) & {"mel", "waveform"}:
        return "speech"
    if kind == "text_image":
        return "multimodal"
    if kind == "text2text":
        return "encoder-decoder"
    return "decoder" if cls.__name__.endswith(("ForCausalLM", "LMHeadModel")) else "encoder"


def describe(spec: str, config: dict[str, Any]) -> dict[str, Any]:
    """What the class behind ``config`` declares: class, family, inputs, output."""
    with quiet_imports():
        cfg = config_object(spec, config)
        cls = model_class(spec, config, cfg)
    inputs = inputs_of(spec, cls, cfg)
    field, dataclass = output_field(cls)
    return {"class": cls.__name__, "family": family_of(cls, inputs["kind"]), "inputs": inputs,
            "output": field, "output_class": dataclass,
            "moe": bool(getattr(cfg.get_text_config(), "num_experts", None)
                        or getattr(cfg.get_text_config(), "num_local_experts", None))}
