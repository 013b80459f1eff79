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
def test_ort_genai_builds_qwen2_whose_config_names_no_end_token(tmp_path):
    # Qwen2's config has no eos_token_id: the builder took one past the vocabulary's end.
    # Gemma 3: ORT GenAI 0.18's builder cannot read transformers 5's per-layer-type
    # rope_parameters (KeyError 'rope_type'); the cell says the builder failed, and this test
    # tells when an upgrade fixes it.
    out = tmp_path / "run"
    proc = run_cli("--workloads", "qwen2_decode,gemma3_decode", "--size", "small", "--backends", "ort-genai",
                   "--threads", "2", *FAST, "--output-dir", out, "--no-history", "--quiet")
    cells = {c["workload"]: c for c in load_results(out)["cells"] if c["backend"] == "ort-genai"}
    qwen2, gemma3 = cells["qwen2_decode"], cells["gemma3_decode"]
    assert qwen2["status"] == "ok" and qwen2["decode"]["token_ids"] == qwen2["decode"]["eager_token_ids"], (
        qwen2["error"], proc.stderr[-2000:])
    assert gemma3["status"] == "failed" and "model builder failed on gemma3_text: KeyError" in gemma3["error"]


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
