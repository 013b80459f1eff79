"""ORT's recorded settings are the ones its session runs with."""
import importlib.util
from pathlib import Path

import pytest

pytestmark = [pytest.mark.unit,
              pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime not installed")]


@pytest.mark.parametrize("spinning", [False, True])
def test_the_recorded_session_settings_are_read_from_the_session_options(spinning):
    import onnxruntime as ort

    from adapters.base import CompileContext
    from adapters.ort import OrtBackend, OrtOptions

    ctx = CompileContext("mlp", "k", "cpu", 3, Path("."), options=OrtOptions(ort_spinning=spinning))
    options, recorded = OrtBackend._session_options(ort, ctx), OrtBackend().settings(ctx)
    assert recorded["intra_op_num_threads"] == options.intra_op_num_threads == 3
    assert recorded["inter_op_num_threads"] == options.inter_op_num_threads == 1
    assert options.execution_mode.name == recorded["execution_mode"]
    assert options.graph_optimization_level.name == recorded["graph_optimization_level"]
    spin = options.get_session_config_entry("session.intra_op.allow_spinning")
    assert spin == recorded["session.intra_op.allow_spinning"] == ("1" if spinning else "0")


def test_the_cell_says_why_spinning_is_off_and_nothing_when_it_is_on():
    from adapters.base import CompileContext
    from adapters.ort import OrtBackend, OrtOptions

    def settings(spinning):
        return OrtBackend().settings(CompileContext("mlp", "k", "cpu", 2, Path("."), options=OrtOptions(ort_spinning=spinning)))

    assert "1.7-2.1x" in settings(False)["guide_deviation"] and "guide_deviation" not in settings(True)
