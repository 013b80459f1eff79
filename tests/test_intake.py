"""Issue 57: ``--model hf:`` reads what the model class declares (inputs from
``main_input_name`` and the forward, sizes from the config with transformers' defaults,
the output from the output dataclass), names each model after its own file, and never
merges two models into one."""
import io
import json
import os
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest

from conftest import FIXTURES, ROOT, run_cli

INTAKE = FIXTURES / "intake"

# config file -> (family, inputs with their shapes, the output field taken, its output shape)
EXPECTED = {
    # a vision config without vocab_size, of a type the old intake did not list
    "mobilenet_v1": ("vision", {"pixel_values": [1, 3, 64, 64]}, "last_hidden_state", [1, 256, 2, 2]),
    # segmentation: its output is logits, not last_hidden_state
    "segformer": ("vision", {"pixel_values": [1, 3, 64, 64]}, "logits", [1, 3, 16, 16]),
    "wav2vec2": ("speech", {"input_values": [1, 16000]}, "last_hidden_state", [1, 1599, 32]),
    # mixture-of-experts: its dataclass starts with aux_loss, which is not the output
    "qwen3_moe": ("decoder", {"input_ids": [1, 64], "attention_mask": [1, 64]}, "logits", [1, 64, 128]),
}

BUILD = """
import json, sys, torch
from workloads import build_model, make_inputs, resolve_workloads
out = []
for w in resolve_workloads(None, sys.argv[1:], "none"):
    specs = w.input_specs("small")
    y = build_model(w, "small")(*make_inputs(specs))
    out.append({"name": w.name, "description": w.description, "family": w.tags[-1],
                "inputs": {s.name: list(s.shape) for s in specs}, "shape": list(y.shape), "finite": bool(torch.isfinite(y).all()),
                "note": getattr(build_model(w, "small"), "build_note", None)})
print(json.dumps(out))
"""


def _resolve_and_build(*specs):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", BUILD, *specs], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_vision_segmentation_audio_and_moe_configs_are_read_from_their_classes():
    built = {b["name"]: b for b in _resolve_and_build(*(f"hf:{INTAKE / name}.json" for name in EXPECTED))}
    assert sorted(built) == sorted(EXPECTED)  # each named after its own file, none dropped
    for name, (family, inputs, field, shape) in EXPECTED.items():
        got = built[name]
        assert got["family"] == family and got["inputs"] == inputs, got
        assert f").{field} (the first field of " in got["description"], got["description"]
        assert got["shape"] == shape and got["finite"], got


def test_a_vision_language_models_prompt_holds_its_image_placeholders_and_its_processors_layout():
    # LLaVA: the CLIP tower's 4 x 4 patches (the CLS feature dropped) are 16 placeholders, and
    # the processor's 224-pixel default gives way to the config's 32. Qwen2-VL: its processor
    # flattens 224 x 224 pixels into 256 patches of 2 x 14 x 14 x 3 with a (1, 16, 16) grid
    # beside them; merged 2 x 2 they are 64 placeholders, between vision start and end.
    built = {b["name"]: b for b in _resolve_and_build(f"hf:{INTAKE / 'llava.json'}", f"hf:{INTAKE / 'qwen2_vl.json'}")}
    llava, qwen = built["llava"], built["qwen2_vl"]
    assert llava["family"] == qwen["family"] == "multimodal"
    assert llava["inputs"] == {"input_ids": [1, 64], "attention_mask": [1, 64], "pixel_values": [1, 3, 32, 32]}, llava
    assert llava["note"].startswith("prompt: 16 image placeholder tokens (id 999) before the text ids"), llava["note"]
    assert llava["shape"] == [1, 16 + 64, 1000] and llava["finite"], llava
    assert qwen["inputs"]["pixel_values"] == [256, 1176], qwen
    assert "64 image placeholder tokens (id 990, between vision start/end)" in qwen["note"], qwen["note"]
    assert "constants beside them: image_grid_thw" in qwen["note"], qwen["note"]
    assert qwen["shape"][:2] == [1, 1 + 64 + 1 + 128] and qwen["finite"], qwen


def test_several_configs_from_one_folder_are_all_run_and_named_after_their_files(tmp_path):
    for name in EXPECTED:
        shutil.copy(INTAKE / f"{name}.json", tmp_path / f"{name}.json")
    shutil.copy(INTAKE / "mobilenet_v1.json", tmp_path / "config.json")
    specs = [f"hf:{p}" for p in sorted(tmp_path.glob("*.json"))] + [f"named=hf:{tmp_path / 'segformer.json'}"]
    names = [b["name"] for b in _resolve_and_build(*specs)]
    # config.json is named after its folder, NAME= names a second copy of one config
    assert sorted(names) == sorted([*EXPECTED, tmp_path.name.lower(), "named"])


def test_two_models_with_one_name_are_a_one_line_error(tmp_path):
    config = tmp_path / "a" / "model.json"
    config.parent.mkdir()
    shutil.copy(INTAKE / "mobilenet_v1.json", config)
    (tmp_path / "b").mkdir()
    shutil.copy(INTAKE / "mobilenet_v1.json", tmp_path / "b" / "model.json")
    proc = run_cli("--model", f"hf:{config}", "--model", f"hf:{tmp_path / 'b' / 'model.json'}", "--backends", "eager",
                   "--output-dir", tmp_path / "run")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "two workloads named 'model'" in lines[0] and "--model OTHER=" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_config_transformers_cannot_build_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model_type": "no_such_type", "architectures": ["NoSuchModel"]}))
    proc = run_cli("--model", f"hf:{bad}", "--backends", "eager", "--output-dir", tmp_path / "run")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "transformers cannot build this config" in proc.stderr


@pytest.mark.unit
def test_a_cell_that_fails_before_any_cell_started_costs_only_its_row():
    # the run used to end in KeyError: None from the progress bar, and the models after it never ran
    from rich.console import Console

    from compare.commands import RichProgress

    out = io.StringIO()
    with RichProgress(Console(file=out)) as progress:
        progress.cell_finished(SimpleNamespace(status="failed", speedup=None, error="no such size", label="m", backend="eager"))
        progress.cell_started(2, 2, "n", "eager")
        progress.cell_finished(SimpleNamespace(status="ok", speedup=None, error=None, label="n", backend="eager"))
    assert "m x eager: failed: no such size" in out.getvalue() and "n x eager: ok" in out.getvalue()


def test_a_users_moe_causal_lm_decodes_as_its_uncached_forward():
    # issue 57: an MoE decoder (Qwen3-MoE, tiny) also generates with --suite llm; its experts
    # change nothing in the cache, so prefill + decode steps give the full forward's logits
    code = """
import sys, torch
from workloads import build_model, make_inputs, resolve_workloads
(w,) = [w for w in resolve_workloads(None, [sys.argv[1]], "llm") if w.name == "qwen3_moe_decode"]
model = build_model(w, "small", 0)
prompt = make_inputs(w.input_specs("small"), 0)[0]
prefill, step = model.prefill_module(), model.decode_module()
sequence = prompt
with torch.no_grad():
    logits, k_cache, v_cache = prefill(prompt)
    for index in range(4):
        full = model(sequence)[:, -1]
        assert torch.allclose(logits, full, atol=1e-4, rtol=1e-5), index
        token = logits.argmax(-1, keepdim=True)
        sequence = torch.cat([sequence, token], dim=1)
        logits, k_cache, v_cache = step(token, torch.tensor([sequence.shape[1] - 1]), k_cache, v_cache)
print("ok")
"""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", code, f"hf:{INTAKE / 'qwen3_moe.json'}"], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


@pytest.mark.unit
def test_the_zoos_moe_decoders_generate_with_suite_llm():
    from workloads import resolve_workloads

    for entry in ("olmoe", "granite_moe"):
        picked = {w.name: w for w in resolve_workloads(None, [f"hf:{entry}"], "llm")}
        decode = picked[f"{entry}_decode"]
        assert decode.source == f"hf:{entry}" and decode.params("small")["prompt"] == 8
        # a worker resolves a cell's workload by name from the specs its cell carries (the source)
        (again,) = resolve_workloads([decode.name], [decode.source])
        assert again.params("small") == decode.params("small")
