"""ORT GenAI: its model builder's decoder and Generator, on the decode suite's small Llama."""
import importlib.util
import json

import pytest

from conftest import FAST, load_results, run_cli

needs_genai = pytest.mark.skipif(importlib.util.find_spec("onnxruntime_genai") is None,
                                 reason="onnxruntime-genai not installed (pip install -e '.[ortgenai]')")


@pytest.mark.unit
def test_the_session_uses_the_runs_threads(tmp_path):
    from adapters.ort_genai import set_threads

    path = tmp_path / "genai_config.json"
    path.write_text(json.dumps({"model": {"decoder": {"session_options": {"log_id": "x"}}}}))
    set_threads(path, 2)
    options = json.loads(path.read_text())["model"]["decoder"]["session_options"]
    assert options == {"log_id": "x", "intra_op_num_threads": 2, "inter_op_num_threads": 1}


@pytest.mark.unit
def test_ort_genai_takes_decode_workloads_only():
    from adapters import get_backend

    assert "decoder LLMs only" in get_backend("ort-genai").unavailable_for(("models",))
    assert get_backend("ort-genai").weight_only_recipe(8) is None  # no int8 recipe: unavailable at int8wo


@needs_genai
@pytest.mark.slow  # two model builds: kept out of the default suite's 15 minutes
def test_ort_genai_builds_qwen2_and_gemma3(tmp_path):
    # Qwen2's config has no eos_token_id: the builder took one past the vocabulary's end.
    # Gemma 3: ORT GenAI 0.18's builder read only transformers 4's flat RoPE fields
    # (KeyError 'rope_type' on transformers 5's per-layer-type rope_parameters).
    out = tmp_path / "run"
    proc = run_cli("--workloads", "qwen2_decode,gemma3_decode", "--size", "small", "--backends", "ort-genai",
                   "--threads", "2", *FAST, "--output-dir", out, "--no-history", "--quiet")
    cells = {c["workload"]: c for c in load_results(out)["cells"] if c["backend"] == "ort-genai"}
    for workload, cell in cells.items():
        assert cell["status"] == "ok" and cell["decode"]["token_ids"] == cell["decode"]["eager_token_ids"], (
            workload, cell["error"], proc.stderr[-2000:])
    assert "rope_shim" in cells["gemma3_decode"]["info"]["prefill"]
    assert "rope_shim" not in cells["qwen2_decode"]["info"]["prefill"]


@pytest.mark.unit
def test_gemma3s_per_layer_rope_is_flattened_for_the_builder_and_others_are_left_alone():
    from transformers import Gemma3TextConfig, Qwen2Config

    from adapters.ort_genai import flatten_per_layer_rope

    gemma3 = Gemma3TextConfig()
    assert flatten_per_layer_rope(gemma3)
    assert (gemma3.rope_theta, gemma3.rope_local_base_freq) == (1_000_000.0, 10_000.0)
    assert gemma3.rope_parameters["rope_type"] == "default"
    qwen2 = Qwen2Config()
    before = dict(qwen2.rope_parameters)
    assert not flatten_per_layer_rope(qwen2) and qwen2.rope_parameters == before


@needs_genai
def test_ort_genai_generates_eagers_tokens_and_its_int4_is_read_against_fp32(tmp_path):
    out = tmp_path / "run"
    proc = run_cli("--workloads", "llama_decode", "--size", "small", "--dtype", "fp32,int4wo", "--backends",
                   "ort-genai", "--threads", "2", *FAST, "--output-dir", out, "--no-history", "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = {(c["backend"], c["dtype"]): c for c in load_results(out)["cells"]}
    fp32 = cells[("ort-genai", "fp32")]
    assert fp32["status"] == "ok" and fp32["numerics_ok"], (fp32["error"], fp32["numerics_error"])
    assert fp32["decode"]["token_ids"] == fp32["decode"]["eager_token_ids"]
    assert fp32["info"]["prefill"]["genai"]["precision"] == "fp32"
    assert {"prefill_build", "prefill_load"} <= set(fp32["compile_phases"])
    int4 = cells[("ort-genai", "int4wo")]
    assert int4["status"] == "ok", int4["error"]
    assert 0.0 <= int4["decode"]["accuracy_vs_fp32"]["top1_agreement"] <= 1.0
