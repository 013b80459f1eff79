"""``--suite census``: every architecture transformers' auto mappings name, built from its
default config shrunk to a tiny width and depth, plus torchvision's classification models
and the smallest variant of each timm family, for a coverage matrix at that scale
(``--coverage-only``). Nothing is downloaded: configs are transformers' defaults, weights
seeded random.

An architecture whose config or inputs cannot be made is still a workload: building it
raises the reason, so its row says why instead of vanishing."""
from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

from ..base import TensorSpec, Workload, WorkloadError, lazy

PREFIX = "census:"
CENSUS_SEQ = 32  # tokens of a text input: a tiny census, not a published size
# Config fields shrunk, by what they hold; a composite config's parts (text_config,
# vision_config...) likewise. Given to AutoConfig.for_model as overrides, so fields derived
# from them (layer_types, stage_names) follow.
LAYERS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
          "num_encoder_layers", "num_decoder_layers")
# A vision tower's output width (Qwen2.5-VL's out_hidden_size, PaliGemma's projection_dim) must
# meet the text model's: shrunk with the widths.
WIDTHS = ("hidden_size", "d_model", "n_embd", "embed_dim", "dim", "out_hidden_size", "projection_dim")
HEADS = ("num_attention_heads", "n_head", "n_heads", "encoder_attention_heads", "decoder_attention_heads",
         "num_heads")
FFN = ("intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "n_inner", "d_ff",
       "moe_intermediate_size", "shared_expert_intermediate_size")
EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts")
TOP_K = ("num_experts_per_tok", "moe_topk")
TINY = {**dict.fromkeys(LAYERS, 2), **dict.fromkeys(WIDTHS, 64), **dict.fromkeys(FFN, 128),
        **dict.fromkeys(EXPERTS, 4), **dict.fromkeys(TOP_K, 2), "num_key_value_heads": 2, "head_dim": 16}
# Where the tiny widths break a rule of the architecture (a field this list does not know
# sizes a projection from the head: GPT-J's rotary_dim, Qwen2-VL's rope sections, DeepSeek's
# MLA dims; 80 of transformers' 631 failed on a shape), the census tries two more rules in
# turn: two heads of the config's own head size ("heads"), then the widths as they are
# ("depth"); each shrinks the layers and experts, and is tried where its model holds at most
# SHRINK_PARAMS parameters.
RULES = ("tiny", "heads", "depth")
DEPTH = (*LAYERS, *EXPERTS, *TOP_K)
SHRINK_PARAMS = 300_000_000
# timm: the smallest variant of each family, by these size words in its name.
TIMM_SIZES = ("atto", "femto", "pico", "nano", "tiny", "small", "b0", "18", "050", "100")


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def head_size(values: dict[str, Any]) -> int | None:
    """The config's width per attention head: its head_dim, else its width over its heads."""
    if _int(values.get("head_dim")):
        return values["head_dim"]
    width = next((values[k] for k in WIDTHS if _int(values.get(k))), None)
    heads = next((values[k] for k in HEADS if _int(values.get(k))), None)
    return width // heads if width and heads else None


def shrunk(values: dict[str, Any], rule: str = "tiny", cut_lists: bool = False) -> dict[str, Any]:
    """The overrides that shrink a config by ``rule`` (``RULES``), each sub-config likewise.
    Every rule: at most 2 layers, 4 experts, top-2. ``tiny``: each size field at most its
    tiny value, heads a divisor of the width (4, 2 or 1). ``heads``: 2 heads (and key/value
    heads) of the config's own head size, the width 2 heads, the FFN 8 heads. ``depth``: the
    widths as they are. ``cut_lists``: a list as long as the layers (``layers_block_type``) is
    cut to match, for a config that does not derive it from the layer count itself."""
    out: dict[str, Any] = {}
    head = head_size(values) if rule == "heads" else None
    for key, value in values.items():
        if isinstance(value, dict) and "model_type" in value:
            sub = shrunk(value, rule, cut_lists)
            if sub:
                out[key] = {"model_type": value["model_type"], **sub}
        elif _int(value) and (small := shrunk_field(key, value, rule, head)) is not None and small != value:
            out[key] = small
            if key in LAYERS and cut_lists:
                out.update({k: v[:small] for k, v in values.items() if isinstance(v, list) and len(v) == value})
    return out


def shrunk_field(key: str, value: int, rule: str, head: int | None) -> int | None:
    """One integer field's value under ``rule`` (``shrunk``); None: left as it is."""
    if key in DEPTH or (rule == "tiny" and key in TINY):
        return min(value, TINY[key])
    if rule == "tiny" and key in HEADS:
        return 4 if value >= 4 else 2 if value >= 2 else 1
    if head and key in (*HEADS, "num_key_value_heads"):
        return min(value, 2)
    if head and key in WIDTHS:
        return min(value, 2 * head)
    if head and key in FFN:
        return min(value, 8 * head)
    return None


def transformers_types() -> list[str]:
    """The config types with an AutoModel class: what transformers can build as a model."""
    from transformers.models.auto import configuration_auto, modeling_auto

    return sorted(t for t in configuration_auto.CONFIG_MAPPING_NAMES if t in modeling_auto.MODEL_MAPPING_NAMES)


def tiny_config(model_type: str, rule: str = "tiny", cut_lists: bool = False) -> dict[str, Any]:
    """``model_type``'s default config as overrides that shrink it by ``rule`` (a JSON config)."""
    defaults = default_config(model_type)
    return covering_vocab(defaults, {"model_type": model_type, **shrunk(defaults, rule, cut_lists)})


def covering_vocab(defaults: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with its text vocabulary grown to hold the special tokens the defaults name
    past its end: LLaVA's default image token is 32000 in a 32000-token Llama, which no
    published checkpoint is (theirs: 32064), and its embedding would be read out of range."""
    from .hf_class import token_ids

    text = defaults.get("text_config") if isinstance(defaults.get("text_config"), dict) else defaults
    vocab = text.get("vocab_size")
    special = token_ids(defaults, text)
    if not _int(vocab) or not special or max(special) < vocab:
        return config
    if text is defaults:
        return {**config, "vocab_size": max(special) + 1}
    part = {"model_type": text.get("model_type"), **config.get("text_config", {}), "vocab_size": max(special) + 1}
    return {**config, "text_config": part}


@functools.lru_cache(maxsize=None)  # a type's rules (and their cut variants) all start from it
def default_config(model_type: str) -> dict[str, Any]:
    """transformers' default config of ``model_type``, as a dict (read, never changed)."""
    from .hf_class import quiet_imports, transformers_module

    transformers = transformers_module()
    with quiet_imports():
        return transformers.AutoConfig.for_model(model_type).to_dict()


def vision_names() -> list[str]:
    """``torchvision:NAME`` for its classification models, ``timm:NAME`` for the smallest
    variant of each timm family."""
    from . import import_torchvision

    names = []
    try:
        torchvision = import_torchvision()
        names += [f"torchvision:{n}" for n in sorted(torchvision.models.list_models(module=torchvision.models))]
    except ImportError:
        pass
    try:
        import timm
    except ImportError:
        return names
    families: dict[str, str] = {}
    for name in timm.list_models():
        family = name.split("_")[0].rstrip("0123456789")
        if family not in families and any(size in name for size in TIMM_SIZES):
            families[family] = name
    return names + [f"timm:{n}" for n in sorted(families.values())]


def workload_name(spec: str) -> str:
    kind, _, name = spec.partition(":")
    return {"hf": "hf_", "timm": "timm_", "torchvision": "tv_"}[kind] + re.sub(r"[^a-z0-9_]", "_", name.lower())


def census_entry(spec: str, rule: str | None = None) -> dict[str, Any]:
    """The zoo entry for one census spec (``hf:TYPE``, ``timm:NAME``, ``torchvision:NAME``);
    a transformers one shrunk by ``rule``, or by the first of ``RULES`` whose config
    transformers accepts (its validators: heads that divide the width, say), named in the
    entry's ``rule``."""
    from .intake import spec_entry

    kind, _, name = spec.partition(":")
    entry = spec_entry(spec) if kind != "hf" else rule_entry(name, rule) if rule else first_accepted(name)
    if "seq" in entry["inputs"]:
        entry["inputs"] = {**entry["inputs"], "seq": min(CENSUS_SEQ, entry["inputs"]["seq"])}
    return {**entry, "name": workload_name(spec), "census": spec}


def rule_entry(name: str, rule: str) -> dict[str, Any]:
    """The entry of ``name`` shrunk by ``rule``: its per-layer lists left for the config to
    derive (NeoMMe's ``layer_types`` must keep a full-attention layer), else, where the config
    is refused so, cut with the layers (Zamba's ``layers_block_type``)."""
    from .intake import config_entry

    try:
        return {**config_entry(f"hf:{name}", tiny_config(name, rule), None), "rule": rule}
    except WorkloadError as refused:
        if "cannot build this config" not in str(refused):
            raise
        try:
            return {**config_entry(f"hf:{name}", tiny_config(name, rule, cut_lists=True), None), "rule": rule}
        except WorkloadError:
            raise refused from None


@functools.lru_cache(maxsize=None)  # the parent resolves the run's workloads twice (config, runner)
def census_workload(spec: str) -> Workload:
    """One architecture as a workload at every size; one whose entry cannot be made builds
    into its reason (the eager cell fails with it)."""
    from . import entry_workload

    origin = PREFIX + spec
    try:
        workload = entry_workload(census_entry(spec), origin, sizes=("small", "default"))
        return dataclasses.replace(workload, build=lazy("zoo.census", "build_census"))
    except (WorkloadError, ValueError, ImportError, KeyError, TypeError, AttributeError) as exc:
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        params = {"origin": origin, "reason": reason}
        return Workload(name=workload_name(spec), description=f"{spec}: not built ({reason})",
                        sizes={"small": params, "default": params}, build=lazy("zoo.census", "unbuildable"),
                        inputs=lambda p: [TensorSpec((1,), "float32", name="x")], tags=("census", "unbuilt"),
                        source=origin)


def build_census(params: dict[str, Any]):
    """A census workload's module, in the worker (``census_model``)."""
    from . import offline_imports

    offline_imports()
    return census_model(params["origin"].removeprefix(PREFIX), params["size"])


def first_accepted(name: str) -> dict[str, Any]:
    """The entry of the first rule whose config transformers accepts and, past the first, whose
    model holds at most ``SHRINK_PARAMS`` parameters; the first rule's error where none does."""
    from .build import parameter_count

    refused: WorkloadError | None = None
    others = []
    for rule in RULES:
        try:
            entry = rule_entry(name, rule)
        except WorkloadError as exc:
            if "cannot build this config" not in str(exc):
                raise
            refused = refused or exc
            others.append(f"{rule}: refused")
            continue
        count = 0 if rule == RULES[0] else parameter_count(entry, "small")
        if count <= SHRINK_PARAMS:
            return entry
        others.append(f"{rule}: {count / 1e6:.0f} M parameters")
    assert refused is not None  # the first rule was refused, or it would have been returned
    raise WorkloadError(f"no shrink rule gives a model ({'; '.join(others)}): {str(refused).splitlines()[0]}") \
        from refused


def census_model(spec: str, size: str):
    """The census model of ``spec``, built in the worker. A transformers model is built by
    each shrink rule in turn (``RULES``) and called once on the workload's inputs (which no
    rule changes); the first that runs is the model, and ``build_note`` says which rule
    where it is not the first. Where none runs, the tiny model's error stands."""
    from workloads import make_inputs

    from . import entry_workload
    from .build import entry_model

    entry = census_entry(spec)
    if not spec.startswith("hf:"):
        return entry_model(entry, size)
    inputs = make_inputs(entry_workload(entry, PREFIX + spec).input_specs(size))
    try:
        model = called_model(entry, size, inputs)
    except Exception as first_error:
        first = f"{type(first_error).__name__}: {str(first_error).splitlines()[0][:120] if str(first_error) else ''}"
        tried = [entry["config"]]
        for rule in RULES[RULES.index(entry["rule"]) + 1:]:
            model = other_rule_model(spec, rule, size, inputs, tried)
            if model is not None:
                return noted(model, f"census: shrunk by the {rule!r} rule (by the {entry['rule']!r} rule: {first})")
        raise
    if entry["rule"] != RULES[0]:
        noted(model, f"census: shrunk by the {entry['rule']!r} rule (transformers refused the tiny config)")
    return model


def noted(model, note: str):
    """``model`` with ``note`` first in its ``build_note`` (a VLM's prompt note stays after it)."""
    model.build_note = note + (f"; {old}" if (old := getattr(model, "build_note", None)) else "")
    return model


def called_model(entry: dict[str, Any], size: str, inputs: list):
    """The entry's model, built and called once on ``inputs`` (raises what either raises)."""
    import torch

    from .build import entry_model

    model = entry_model(entry, size)
    with torch.no_grad():
        model(*inputs)
    return model


def other_rule_model(spec: str, rule: str, size: str, inputs: list, tried: list):
    """``spec``'s model shrunk by ``rule``, called once; None where its config was ``tried``
    already, it holds more than ``SHRINK_PARAMS`` parameters, or it fails too."""
    from .build import parameter_count

    try:
        entry = census_entry(spec, rule)
        if entry["config"] in tried:
            return None
        tried.append(entry["config"])
        if parameter_count(entry, size) > SHRINK_PARAMS:
            return None
        return called_model(entry, size, inputs)
    except Exception:
        return None


def unbuildable(params: dict[str, Any]):
    raise WorkloadError(f"census: {params['origin'][len(PREFIX):]} cannot be built: {params['reason']}")


@functools.lru_cache(maxsize=1)
def census_specs() -> tuple[str, ...]:
    return tuple(f"hf:{t}" for t in transformers_types()) + tuple(vision_names())


def census_workloads() -> list[Workload]:
    from .hf_class import quiet_imports

    with quiet_imports():
        return [census_workload(spec) for spec in census_specs()]
