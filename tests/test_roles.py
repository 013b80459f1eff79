"""The reference is a role a cell carries, not a backend's name: files from before the role
load with eager as the reference, and the reports read the role."""
import ast
import json
from pathlib import Path

import pytest

from compare.report import coverage
from compare.results.derived import fill_derived
from compare.results.roles import CANDIDATE, REFERENCE, reference_first, role_of
from compare.results.schema import Cell, LatencyStats, ResultsError, RunResults

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def _stats(ms: float) -> LatencyStats:
    return LatencyStats.from_ms([ms, ms * 1.01, ms * 0.99, ms * 1.02], 1)


def test_the_role_follows_the_runs_reference_and_weight_only_cells_are_candidates():
    assert role_of("eager", "fp32") == REFERENCE and role_of("eager", "int8") == REFERENCE
    assert role_of("eager", "int4wo") == CANDIDATE and role_of("ort", "fp32") == CANDIDATE
    assert role_of("ort", "fp32", reference="ort") == REFERENCE
    assert reference_first(["inductor", "eager", "ort"]) == ["eager", "inductor", "ort"]
    assert reference_first(["inductor", "ort"], reference="ort") == ["ort", "inductor"]


def test_a_version_7_file_gets_roles_and_an_unknown_role_is_refused(tmp_path):
    cells = [Cell.from_flat(workload="mlp", backend=b, status="ok", dtype=d).to_dict()
             for b, d in (("eager", "fp32"), ("inductor", "fp32"), ("eager", "int4wo"))]
    for cell in cells:
        del cell["role"]
    data = RunResults(environment={}, config={}, cells=[], run_id="r").to_dict()
    (tmp_path / "results.json").write_text(json.dumps(dict(data, schema_version=7, cells=cells)))
    loaded = RunResults.load(tmp_path)
    assert [c.role for c in loaded.cells] == [REFERENCE, CANDIDATE, CANDIDATE]
    with pytest.raises(ResultsError, match="unknown role 'judge'"):
        Cell.from_dict(dict(cells[0], role="judge"))


def test_reports_read_the_role_not_the_name():
    """A run whose reference is ORT: its ORT cell heads the matrix row as eager's would, and
    eager is one of the compared backends."""
    reference = Cell.from_flat(workload="bert", backend="ort", status="ok", role=REFERENCE, latency=_stats(10.0),
                     eager_latency=_stats(10.0), numerics_ok=True)
    candidate = Cell.from_flat(workload="bert", backend="eager", status="ok", role=CANDIDATE, latency=_stats(20.0),
                     eager_latency=_stats(10.0), numerics_ok=True)
    results = RunResults(environment={}, config={"reference": "ort"}, cells=[reference, candidate], run_id="r")
    fill_derived(results)
    assert reference.speedup_ci is None and reference.costs.break_even_note == "reference"
    assert candidate.speedup == pytest.approx(0.5, rel=0.02) and candidate.speedup_ci is not None
    records = coverage.matrix(results)
    assert [r["backend"] for r in coverage.backend_rows(records)] == ["eager"]
    text = {r["backend"]: coverage.cell_text(r) for r in records}
    assert text["ort"].startswith("pass (10") and text["eager"].startswith("pass 0.50x")


def _eager_comparisons(path: Path, root: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            constants = [o for o in operands if isinstance(o, ast.Constant)]
            constants += [e for o in operands if isinstance(o, (ast.Tuple, ast.List, ast.Set)) for e in o.elts
                          if isinstance(e, ast.Constant)]
            if any(c.value == "eager" for c in constants):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_backend_name_is_compared_with_eager_outside_the_roles_declaration(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('if cell.backend != "eager" or b not in ("eager", "ort"):\n    pass\nx = {"eager": 1}\n')
    assert _eager_comparisons(probe, tmp_path) == ["probe.py:1"] * 2  # both found; a key is no comparison
    files = [f for f in (ROOT / "compare").rglob("*.py") if f.name != "roles.py"]
    assert [hit for f in files for hit in _eager_comparisons(f, ROOT)] == []
