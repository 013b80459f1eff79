"""compare bisect: the search and its rule on synthetic input, then a real bisect of a
backend that gets one op wrong on purpose (tests/fixtures/plugin), down to a reproducer
that fails when run. The two real findings (IREE's tanh-GELU, TVM's negative select on
GPT-2) are in the slow tier."""
import json
import math
import os
import subprocess
import sys

import pytest

from conftest import FAST, FIXTURES, ROOT, load_results, run_cli

PLUGIN = FIXTURES / "plugin"


@pytest.mark.unit
def test_first_bad_finds_the_first_of_a_bad_tail_in_few_probes():
    from compare.experiments.bisect import first_bad

    for count, start in ((1, 0), (53, 23), (53, 0), (53, 52), (500, 321)):
        asked = []
        assert first_bad(count, lambda i: asked.append(i) or i >= start) == start
        assert len(set(asked)) <= math.ceil(math.log2(count)) + 1
    assert first_bad(10, lambda i: False) is None
    assert first_bad(0, lambda i: True) is None


@pytest.mark.unit
def test_judge_blames_an_error_beyond_the_factor_and_non_finite_values():
    import torch

    from compare.experiments.bisect import judge

    ref = torch.linspace(-1, 1, 101, dtype=torch.float64)
    eager = ref + 1e-7
    assert not judge("x", ref + 5e-7, ref, eager, eps=1.2e-7).bad  # 5x eager's error: ordinary rounding
    assert judge("x", ref + 1e-5, ref, eager, eps=1.2e-7).bad  # 100x
    assert judge("x", torch.where(ref > 0.5, math.nan, ref), ref, eager, eps=1.2e-7).bad
    assert judge("x", ref[:50], ref, eager, eps=1.2e-7).bad  # a wrong shape
    exact = judge("i", torch.arange(4), torch.arange(4.0, dtype=torch.float64), torch.arange(4), eps=1.2e-7)
    assert not exact.bad and exact.error == 0


def _plugin_env(tmp_path):
    site = tmp_path / "site" / "dlcompare_perturb-0.1.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Metadata-Version: 2.1\nName: dlcompare-perturb\nVersion: 0.1\n")
    (site / "entry_points.txt").write_text("[dlcompare.backends]\nperturb = dlcompare_perturb_backend:PerturbBackend\n")
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(PLUGIN)])}


def test_bisect_names_the_injected_bad_op_and_writes_a_failing_reproducer(tmp_path):
    env = _plugin_env(tmp_path)
    run_dir = tmp_path / "run"
    proc = run_cli("--backends", "perturb", "--workloads", "elementwise_chain", "--size", "small", *FAST,
                   "--output-dir", run_dir, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the cell disagrees with eager
    cell = next(c for c in load_results(run_dir)["cells"] if c["backend"] == "perturb")
    assert cell["numerics_ok"] is False and cell["info"]["shifted_ops"] == 1

    proc = run_cli("bisect", run_dir, "--cell", "elementwise_chain/perturb", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = run_dir / "bisect" / "elementwise_chain.perturb"
    finding = json.loads((out / "bisect.json").read_text())
    # Its probe table in the message: a bisect that blames another op, or none, shows why.
    assert (finding["op"] or "").startswith("aten.tanh.default("), proc.stdout + proc.stderr
    assert finding["isolated"]["bad"] is True and finding["isolated"]["error"] == pytest.approx(1e-3, rel=0.01)
    probes = {p["node"]: p["bad"] for p in finding["probes"]}
    assert probes[finding["node"]] is True
    assert len(probes) <= math.ceil(math.log2(finding["ops"])) + 1  # a binary search, not a scan
    assert "first bad op" in proc.stdout and "aten.tanh.default" in proc.stdout

    repro = subprocess.run([sys.executable, str(out / "repro.py")], capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, **env), cwd=tmp_path)
    assert repro.returncode == 1, repro.stdout + repro.stderr
    assert "WRONG" in repro.stdout

    proc = run_cli("bisect", run_dir, "--cell", "elementwise_chain/perturb", "--timeout", "0.5", env=env)
    assert proc.returncode == 1 and "bisect failed" in proc.stdout and "timeout" in proc.stdout  # its worker, not us
    assert not (out / "bisect.json").exists()  # no stale finding left beside a failed bisect

    proc = run_cli("bisect", run_dir, "--cell", "elementwise_chain/nope", env=env)
    assert proc.returncode == 2 and "no cell 'elementwise_chain/nope'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # default tier: 20 minutes on 2 cores; CI runs it in the slow tier
def test_bisect_of_a_correct_cell_blames_nothing(tmp_path):
    env = _plugin_env(tmp_path)
    run_dir = tmp_path / "run"
    proc = run_cli("--backends", "perturb", "--perturb-op", "aten.nothing.default", "--workloads", "mlp", "--size",
                   "small", *FAST, "--output-dir", run_dir, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_cli("bisect", run_dir, "--cell", "mlp/perturb", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    finding = json.loads((run_dir / "bisect" / "mlp.perturb" / "bisect.json").read_text())
    assert finding["node"] is None and finding["reproducer"] is None and len(finding["probes"]) == 1
    assert "no op to blame" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("backend, flags, op", [
    ("iree", (), "aten.gelu.default(linear_2, approximate='tanh')"),
    ("tvm-untuned", ("--tvm-negative-index-fix", "off"), "aten.select.int(layer_norm_4, 1, -1)"),
])
def test_bisect_finds_the_two_known_gpt2_findings(tmp_path, backend, flags, op):
    pytest.importorskip("iree.runtime" if backend == "iree" else "tvm")
    run_dir = tmp_path / "run"
    proc = run_cli("--suite", "models", "--workloads", "gpt2", "--size", "small", "--backends", backend, *flags, *FAST,
                   "--output-dir", run_dir)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    proc = run_cli("bisect", run_dir, "--cell", f"gpt2/{backend}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = run_dir / "bisect" / f"gpt2.{backend}"
    assert json.loads((out / "bisect.json").read_text())["op"] == op
    repro = subprocess.run([sys.executable, str(out / "repro.py")], capture_output=True, text=True, timeout=600,
                           cwd=ROOT)
    assert repro.returncode == 1, repro.stdout + repro.stderr
