"""Backend variants: ``BASE:FLAG=VALUE`` runs one backend under two settings in one run,
each cell under its full name, with its own options and its own caches."""
import pytest

from conftest import FAST, load_results, run_cli


@pytest.mark.unit
def test_a_variant_is_its_backend_with_typed_options_on_top():
    from adapters import get_backend, split_variant

    assert split_variant("ort") == ("ort", {})
    assert split_variant("ort:ort-spinning=on:--onnx-opset=18") == ("ort", {"ort-spinning": "on", "onnx-opset": "18"})
    plain, variant = get_backend("ort"), get_backend("ort:ort-spinning=on:onnx-opset=18")
    assert type(plain) is type(variant) and variant.name == "ort:ort-spinning=on:onnx-opset=18" and plain.name == "ort"
    options = {"onnx_opset": 20, "ort_spinning": False}
    assert plain.typed_options(options) == plain.options_type(onnx_opset=20, ort_spinning=False)
    assert variant.typed_options(options) == plain.options_type(onnx_opset=18, ort_spinning=True)
    assert get_backend("iree:iree-opt-level=O3").typed_options({}).iree_opt_level == "O3"


@pytest.mark.unit
@pytest.mark.parametrize("name, message", [
    ("nope:x=1", "unknown backend 'nope'"),
    ("ort:ort-spinning", "'ort-spinning' is not FLAG=VALUE"),
    ("ort:no-such=1", "no option 'no-such' for this backend (its options: onnx-opset, ort-exporter, ort-offline-streams, ort-spinning)"),
    ("ort:ort-spinning=maybe", "ort-spinning='maybe': use on or off"),
    ("ort:onnx-opset=0", "onnx-opset='0': must be positive"),
    ("iree:iree-opt-level=O9", "iree-opt-level='O9': choose from"),
])
def test_a_bad_variant_is_refused_naming_what_is_wrong(name, message):
    from adapters import get_backend

    with pytest.raises((KeyError, ValueError), match=message.replace("(", r"\(").replace(")", r"\)")):
        get_backend(name)


def test_bad_variant_on_the_command_line_is_one_line_and_exit_2():
    proc = run_cli("--backends", "ort:ort-spinning=maybe", "--workloads", "mlp")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("compare: error: backend variant 'ort:ort-spinning=maybe': "
                                   "ort-spinning='maybe': use on or off"), proc.stderr


@pytest.mark.slow  # default tier: 20 minutes on 2 cores; CI runs it in the slow tier
def test_two_settings_of_one_backend_in_one_run(tmp_path):
    pytest.importorskip("onnxruntime")
    proc = run_cli("--backends", "ort,ort:ort-spinning=on:onnx-opset=18", "--workloads", "mlp", "--size", "small",
                   *FAST, "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cells = {c["backend"]: c for c in load_results(tmp_path)["cells"]}
    plain, variant = cells["ort"], cells["ort:ort-spinning=on:onnx-opset=18"]
    assert plain["status"] == variant["status"] == "ok" and variant["numerics_ok"]
    assert (plain["settings"]["onnx_opset"], variant["settings"]["onnx_opset"]) == (20, 18)
    assert "guide_deviation" in plain["settings"] and "guide_deviation" not in variant["settings"]
    assert "ort:ort-spinning=on:onnx-opset=18" in (tmp_path / "summary.md").read_text()
