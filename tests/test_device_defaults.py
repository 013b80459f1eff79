"""What a device chooses where the command line says nothing: on CUDA, the large size (the
default shapes are launch-bound on a GPU), stated with the run."""
import pytest

from compare import cli
from compare.report.text import preset_text

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("argv, size, preset", [
    ([], "default", {}),
    (["--device", "cuda"], "large", {"size": "large"}),
    (["--device", "cuda", "--size", "small"], "small", {}),
    (["--size", "large"], "large", {}),
])
def test_the_size_defaults_per_device_and_the_conditions_say_who_chose_it(argv, size, preset, tmp_path):
    config = cli.make_config(cli.parse([*argv, "--backends", "inductor", "--workloads", "mlp",
                                        "--output-dir", str(tmp_path)]))
    assert config.size == size and config.preset == preset
    said = preset_text(config.to_dict())
    assert ("--device cuda set size large" in said) == bool(preset)


def test_a_device_size_that_a_chosen_workload_lacks_falls_back_to_the_default(tmp_path):
    """The zoo and the real decoders have no large size: a CUDA run of them keeps the default."""
    config = cli.make_config(cli.parse(["--device", "cuda", "--backends", "inductor", "--workloads",
                                        "mlp,llama_decode", "--output-dir", str(tmp_path)]))
    assert config.size == "default" and config.preset == {}
