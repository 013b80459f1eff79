"""Issue 57: ``--suite census``: every architecture transformers' auto mappings name, built
tiny from its default config, plus torchvision's and timm's model lists, coverage-only.
The slice here goes through two compilers; an architecture that cannot be built is a row
that says why, never a silent drop."""
import csv
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, load_results, run_cli

# The default suite's slice: a text model, an MoE and a vision model (a worker a cell costs
# ~7 s here, and the default suite must stay under 15 minutes); the slow tier's: ten.
SLICE = ["hf:bert", "hf:qwen3_moe", "torchvision:mobilenet_v3_small"]
SLOW_SLICE = ["hf:bert", "hf:gpt2", "hf:llama", "hf:t5", "hf:vit", "hf:segformer", "hf:wav2vec2", "hf:qwen3_moe",
              "torchvision:mobilenet_v3_small", "timm:resnet18"]


@pytest.mark.unit
def test_a_config_is_shrunk_with_heads_that_divide_the_width_and_parts_shrunk_too():
    from workloads.zoo.census import shrunk

    defaults = {"model_type": "x", "hidden_size": 768, "num_attention_heads": 3, "num_hidden_layers": 12,
                "intermediate_size": 3072, "vocab_size": 50000, "use_cache": True, "image_size": 224,
                "vision_config": {"model_type": "v", "hidden_size": 32, "num_hidden_layers": 24}}
    assert shrunk(defaults) == {"hidden_size": 64, "num_attention_heads": 2, "num_hidden_layers": 2,
                                "intermediate_size": 128, "vision_config": {"model_type": "v", "num_hidden_layers": 2}}


@pytest.mark.unit
def test_a_default_config_whose_special_tokens_lie_past_its_vocabulary_gets_a_vocabulary_that_holds_them():
    from workloads.zoo.census import covering_vocab

    # LLaVA's defaults: image token 32000 in a 32000-token Llama; the text part's overrides stay.
    llava = {"image_token_index": 32000, "text_config": {"model_type": "llama", "vocab_size": 32000, "bos_token_id": 1}}
    shrunk_llava = {"model_type": "llava", "text_config": {"model_type": "llama", "hidden_size": 64}}
    assert covering_vocab(llava, shrunk_llava) == {
        "model_type": "llava", "text_config": {"model_type": "llama", "hidden_size": 64, "vocab_size": 32001}}
    assert covering_vocab({"vocab_size": 100, "image_token_id": 150}, {"model_type": "x"}) == \
        {"model_type": "x", "vocab_size": 151}
    inside = {"vocab_size": 200, "image_token_id": 150}
    assert covering_vocab(inside, {"model_type": "x"}) == {"model_type": "x"}


@pytest.mark.unit
def test_the_other_rules_keep_the_head_size_or_every_width_and_shrink_layers_and_experts():
    from workloads.zoo.census import shrunk

    defaults = {"model_type": "x", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
                "num_hidden_layers": 28, "intermediate_size": 11008, "num_experts": 64, "num_experts_per_tok": 8,
                "rotary_dim": 64, "text_config": {"model_type": "t", "hidden_size": 512, "num_hidden_layers": 24}}
    assert shrunk(defaults, "heads") == {"hidden_size": 256, "num_attention_heads": 2, "num_key_value_heads": 2,
                                         "num_hidden_layers": 2, "intermediate_size": 1024, "num_experts": 4,
                                         "num_experts_per_tok": 2,
                                         "text_config": {"model_type": "t", "num_hidden_layers": 2}}
    assert shrunk(defaults, "depth") == {"num_hidden_layers": 2, "num_experts": 4, "num_experts_per_tok": 2,
                                         "text_config": {"model_type": "t", "num_hidden_layers": 2}}
    # a per-layer list follows the layers (transformers' validators compare their lengths)
    hybrid = {"model_type": "z", "num_hidden_layers": 4, "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid"],
              "time_step_limit": [0.0, 1.0]}
    assert shrunk(hybrid, cut_lists=True) == {"num_hidden_layers": 2, "layers_block_type": ["mamba", "hybrid"]}
    assert shrunk(hybrid) == {"num_hidden_layers": 2}  # where the config derives it, it is left to the config


def test_a_census_model_whose_tiny_config_breaks_it_is_shrunk_by_the_next_rule():
    # GPT-J's rotary_dim (64) is no field the tiny rule knows: at head size 16 its attention
    # fails on a shape. ESM-C's validator refuses the tiny config outright. Two heads of each
    # one's own head size run, and the model says so.
    code = ("from workloads.zoo.census import census_model, census_workload\n"
            "from workloads import make_inputs\n"
            "for spec in ('hf:gptj', 'hf:esmc'):\n"
            "    w = census_workload(spec)\n    m = census_model(spec, 'small')\n"
            "    m(*make_inputs(w.input_specs('small')))\n    print(getattr(m, 'build_note', 'tiny'))")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    gptj, esmc = proc.stdout.splitlines()[-2:]
    assert "shrunk by the 'heads' rule (by the 'tiny' rule: RuntimeError" in gptj
    assert "shrunk by the 'heads' rule (transformers refused the tiny config)" in esmc


@pytest.mark.unit
def test_a_speech_model_is_fed_features_in_its_own_extractors_layout():
    from workloads.zoo import input_specs

    params = {"batch": 1, "kind": "mel", "mel_bins": 80, "frames": 3000}
    assert [s.shape for s in input_specs(params)] == [(1, 80, 3000)]  # Whisper's bins, then frames
    assert [s.shape for s in input_specs({**params, "features": [201, 80]})] == [(1, 201, 80)]  # Parakeet's
    speech2text = {**params, "kind": "mel2text", "features": [201, 80], "decoder_seq": 8, "vocab": 100}
    assert [(s.name, s.shape) for s in input_specs(speech2text)] == [("input_features", (1, 201, 80)),
                                                                     ("decoder_input_ids", (1, 8))]


@pytest.mark.unit
def test_a_video_model_is_fed_clips_of_the_frames_its_config_names():
    from workloads.zoo import input_specs

    params = {"batch": 1, "kind": "image", "channels": 3, "image": 32, "video_frames": 8}
    assert [s.shape for s in input_specs(params)] == [(1, 8, 3, 32, 32)]
    assert [s.shape for s in input_specs({**params, "video_frames": None})] == [(1, 3, 32, 32)]


def test_the_census_lists_transformers_architectures_and_vision_models():
    code = ("import json\nfrom workloads.zoo.census import census_specs\nspecs = census_specs()\n"
            "print(json.dumps({k: sum(s.startswith(k + ':') for s in specs) for k in ('hf', 'timm', 'torchvision')}))")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts = json.loads(proc.stdout.splitlines()[-1])
    assert counts["hf"] >= 150 and counts["timm"] + counts["torchvision"] >= 50, counts


def _run_slice(tmp_path, models):
    specs = [arg for spec in models for arg in ("--model", f"census:{spec}")] + ["--model", "census:hf:no_such_type"]
    proc = run_cli(*specs, "--backends", "ort,openvino", "--coverage-only", "--timeout", "240",
                   "--output-dir", tmp_path / "run")
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    cells = load_results(tmp_path / "run")["cells"]
    assert len({c["workload"] for c in cells}) == len(models) + 1  # every model a row, the unbuilt one too
    eager = {c["workload"]: c for c in cells if c["backend"] == "eager"}
    built = [name for name, c in eager.items() if c["status"] == "ok"]
    assert len(built) >= len(models) - 1, {n: c.get("error") for n, c in eager.items()}
    assert eager["hf_no_such_type"]["status"] == "failed" and "cannot be built" in eager["hf_no_such_type"]["error"]
    assert all(c.get("latency") is None for c in cells)  # coverage only: nothing timed
    summary = (tmp_path / "run" / "summary.md").read_text()
    assert "| hf_bert | pass | pass | pass |" in summary and "pass rate" in summary.lower()
    with open(tmp_path / "run" / "coverage" / "ort_models_fp32_inference_cpu_accuracy.csv") as f:
        rows = {row["name"]: row for row in csv.DictReader(f)}  # the dynamo harness's CSV, untimed
    assert rows["hf_bert"] == {"dev": "cpu", "name": "hf_bert", "batch_size": "1", "accuracy": "pass"}
    assert not (tmp_path / "run" / "coverage" / "ort_models_fp32_inference_cpu_performance.csv").exists()
    return cells


def test_a_census_slice_runs_coverage_only_through_two_compilers(tmp_path):
    cells = _run_slice(tmp_path, SLICE)
    moe = {c["backend"]: c for c in cells if c["workload"] == "hf_qwen3_moe"}
    assert moe["eager"]["status"] == "ok"  # its float64 reference runs grouped_mm in fp32


@pytest.mark.slow
def test_a_ten_architecture_census_slice_through_two_compilers(tmp_path):
    _run_slice(tmp_path, SLOW_SLICE)
