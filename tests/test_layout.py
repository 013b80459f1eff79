"""The architecture, kept: layers that only import downward, no import cycle among the
project's modules, and a parent side (planning, running, recording, reporting) that never
loads torch or a compiler."""
import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("compare", "adapters", "workloads")
# What the parent imports to plan, run (local or Ray), record and report: every module
# of these packages, and the entry points.
PARENT_PACKAGES = ("compare/harness", "compare/report", "compare/results", "compare/scenarios")
PARENT_MODULES = tuple(sorted(
    ".".join(f.relative_to(ROOT).with_suffix("").parts) for pkg in PARENT_PACKAGES for f in (ROOT / pkg).glob("[!_]*.py")
)) + ("compare.cli", "compare.commands", "compare.config", "compare.api", "adapters")
HEAVY = ("torch", "tvm", "onnxruntime", "iree", "openvino")  # the bare "iree" namespace is only a folder


# From the bottom. A module may import its own layer and those below it, never above.
LAYERS = (
    ("compare.measure",),  # how to time and judge: samplers, statistics, numerics, counting work
    ("compare.results",),  # the records: protocol, schema, roles, derived figures
    ("adapters", "workloads"),  # how to lower and run one backend; what is run
    ("compare.scenarios",),  # how calls are issued, one plug-in each: timing, records, report sections
    ("compare.worker",),  # the worker side: one cell
    ("compare.experiments",),  # one experiment, on the worker's setup
    ("compare.harness",),  # the parent: plans, runs workers, records
    ("compare.report",),  # reads results, never measures
    # the entry points: commands, cli, api, config, bisect, and the worker's
    # entry, which composes what a spec asks for
    ("compare", "compare.worker.__main__"),
)


def layer_of(module: str) -> int:
    """The layer of the longest prefix that names ``module``'s package."""
    matches = [(len(prefix), index) for index, prefixes in enumerate(LAYERS) for prefix in prefixes
               if module == prefix or module.startswith(prefix + ".")]
    return max(matches)[1]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{module} -> {dep}" for module, deps in graph.items() for dep in deps
                  if layer_of(dep) > layer_of(module))


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, module: str) -> set[str]:
    """Every project module a file imports, at the top or inside a function."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)  # "from pkg import submodule"
    return {n for n in names if n.split(".")[0] in PACKAGES}


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(f): f for pkg in PACKAGES for f in (ROOT / pkg).rglob("*.py")}
    graph = {}
    for module, path in files.items():
        found = {n for n in _imported(path, module) if n in files}
        # "from pkg import sub" names pkg.sub, not the package
        graph[module] = {n for n in found if n != module and not any(o.startswith(n + ".") for o in found)}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_every_import_points_down():
    assert upward_imports(import_graph()) == []


def test_an_upward_import_is_found():
    assert upward_imports({"compare.results.schema": {"compare.harness.runner"}, "compare.harness.runner": set()}) == [
        "compare.results.schema -> compare.harness.runner"]


def test_no_import_cycle():
    graph = import_graph()
    assert "compare.harness.runner" in graph and "compare.harness.executor" in graph["compare.harness.runner"]
    assert cycles(graph) == []


def test_the_parent_side_loads_no_framework():
    code = ("import importlib, json, sys\n"
            f"for name in {PARENT_MODULES!r}: importlib.import_module(name)\n"
            "from adapters import backend_names, get_backend\n"
            "[get_backend(b).available('cpu') for b in backend_names()]\n"
            f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} and m != 'iree')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert json.loads(proc.stdout) == []
