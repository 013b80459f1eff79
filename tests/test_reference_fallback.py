"""The float64 numerics reference where float64 has no kernel (issue 57): the ops without one
run in fp32, the others in float64, and the cell records which (``info.float64_reference.fp32_ops``)."""
import importlib.util
import json
from types import SimpleNamespace

import pytest

from conftest import FAST, load_results, run_cli

GROUPED_MM = "aten._grouped_mm.default"
TINY_MOE = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": 128, "hidden_size": 32,
            "intermediate_size": 64, "moe_intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "num_experts": 8, "num_experts_per_tok": 2, "head_dim": 8,
            "max_position_embeddings": 64}


def _experts():
    """Four experts over a token batch, as a mixture-of-experts layer calls them: torch._grouped_mm
    has fp32, bf16 and fp16 kernels on CPU, none for float64."""
    import torch

    class Experts(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(4, 8, 8, generator=torch.Generator().manual_seed(0)))
            self.proj = torch.nn.Linear(8, 3)

        def forward(self, x):
            offs = torch.tensor([3, 6, 9, 12], dtype=torch.int32)  # rows 0-2 to expert 0, 3-5 to expert 1...
            return self.proj(torch.relu(torch._grouped_mm(x, self.weight, offs=offs)))

    return Experts().eval()


def _reference(model, folder=None):
    from compare.worker.steps import Float64Reference

    setup = SimpleNamespace(reference_model=model, fp32_model=None)
    spec = SimpleNamespace(reference_dir=str(folder) if folder else None, workload_key="experts", seed=0)
    return Float64Reference(setup, spec)


@pytest.mark.unit
def test_an_op_without_a_float64_kernel_runs_in_fp32_and_the_reference_says_so(tmp_path):
    import torch

    model, x = _experts(), torch.randn(12, 8, generator=torch.Generator().manual_seed(1))
    with pytest.raises(RuntimeError, match="got Double"):  # the plain float64 twin cannot run it
        model.double()(x.double())
    model.float()
    with torch.no_grad():
        fp32 = model(x)
    reference = _reference(model, tmp_path)
    (out,) = reference.outputs(0, [x])
    assert out.dtype == torch.float64 and torch.allclose(out, fp32.double(), atol=1e-5)
    assert reference.record() == {"shared": 0, "fp32_ops": [GROUPED_MM]}
    (again,) = reference.outputs(1, [x])  # a later draw runs under the fallback at once
    assert torch.equal(again, out) and reference.record()["fp32_ops"] == [GROUPED_MM]
    # a second worker reads the draw from the shared folder, and knows which ops ran in fp32
    other = _reference(model, tmp_path)
    (shared,) = other.outputs(0, [x])
    assert torch.equal(shared, out) and other.record() == {"shared": 1, "fp32_ops": [GROUPED_MM]}


@pytest.mark.unit
def test_a_model_float64_runs_is_untouched_and_a_real_failure_still_raises():
    import torch

    linear, x = torch.nn.Linear(8, 3).eval(), torch.randn(12, 8)
    reference = _reference(linear)
    (out,) = reference.outputs(0, [x])
    with torch.no_grad():
        assert torch.equal(out, linear.double()(x.double()))
    assert reference.record() == {"shared": 0, "fp32_ops": []}

    broken = _experts()
    broken.weight = torch.nn.Parameter(torch.randn(4, 4, 8))  # 8 columns into 4 rows: fails in fp32 too
    with pytest.raises(RuntimeError, match="got Double"):  # the float64 call's own error, as without the fallback
        _reference(broken).outputs(0, [torch.randn(12, 8)])


@pytest.mark.skipif(not importlib.util.find_spec("transformers"), reason="the [zoo] extra is not installed")
def test_a_mixture_of_experts_decoder_has_a_float64_reference_with_grouped_mm_in_fp32(tmp_path):
    """Qwen3-MoE's experts call torch._grouped_mm: its float64 twin failed, and the eager cell with it."""
    config = tmp_path / "tiny_moe" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(TINY_MOE))
    proc = run_cli("--model", f"hf:{config}", "--backends", "eager", *FAST, "--output-dir", tmp_path / "run", timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (cell,) = load_results(tmp_path / "run")["cells"]
    assert cell["status"] == "ok" and cell["numerics_ok"], cell.get("error")
    assert cell["info"]["float64_reference"] == {"draws": 1, "shared": 0, "fp32_ops": [GROUPED_MM]}
    assert cell["max_abs_err_fp64"] is not None
    assert f"float64 reference ran 1 op(s) in fp32 (no float64 kernel): {GROUPED_MM}" in (
        tmp_path / "run" / "summary.md").read_text()
