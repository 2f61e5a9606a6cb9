"""The layers of qcore point one way: every module imports on its own in a fresh interpreter,
the import graph (module-level and deferred imports alike) has no cycle, and the kernels import
nothing from the layers above them."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "qcore"

#: What qcore/kernels must never import: the layers above the kernels, and the app.
ABOVE_KERNELS = ("qcore.ops", "qcore.plans", "qcore.calibration", "qcore.metrics",
                 "qcore.reductions", "qcore.walkthrough", "qcore.quant_params", "qcore.analysis",
                 "app")


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = sorted(module_name(p) for p in PACKAGE.rglob("*.py"))
FILES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def _import_statements(path: pathlib.Path, package: str) -> list[tuple[str, list[str]]]:
    """(module, names imported from it) of every import in the file (module level or inside a
    function), the module as an absolute name; ``import a.b`` gives ("a.b", [])."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.append((base, [alias.name for alias in node.names]))
    return found


def imports_of(name: str) -> set[str]:
    """Every module `name` imports (at module level or inside a function), as absolute names."""
    path = FILES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for base, names in _import_statements(path, package):
        if not names:
            found.add(base)
        for alias in names:  # `from pkg import module` imports the module
            sub = f"{base}.{alias}"
            found.add(sub if sub in FILES else base)
    return found


def graph() -> dict[str, set[str]]:
    g = {}
    for name in MODULES:
        targets = set()
        for target in imports_of(name):
            if (target in FILES or target.split(".")[0] == "app") and target != name:
                targets.add(target)
        g[name] = targets
    return g


def test_import_graph_has_no_cycle():
    g = graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(g.get(n, ())):
            if m not in g:
                continue
            if state.get(m) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(m):] + [m]))
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in MODULES:
        if n not in state:
            visit(n)


def test_kernels_import_nothing_from_the_layers_above():
    g = graph()
    for name in MODULES:
        if not name.startswith("qcore.kernels"):
            continue
        bad = [t for t in g[name] if any(t == a or t.startswith(a + ".") for a in ABOVE_KERNELS)]
        assert not bad, f"{name} imports {bad}"


def test_the_metrics_side_and_calibration_do_not_import_each_other():
    g = graph()
    metrics_side = {"qcore.metrics", "qcore.walkthrough", "qcore.reductions",
                    "qcore.quant_params"}
    for name in metrics_side:
        assert "qcore.calibration" not in g[name], name
        assert "qcore.analysis" not in g[name], name
    assert "qcore.metrics" not in g["qcore.calibration"]
    assert "qcore.walkthrough" not in g["qcore.calibration"]


def test_the_engine_imports_no_ui():
    for name in MODULES:
        for target in imports_of(name):
            top = target.split(".")[0]
            assert top not in ("streamlit", "plotly", "playwright", "app"), \
                f"{name} imports {target}"


def _import_alone(name: str) -> tuple[str, int, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    return name, proc.returncode, proc.stderr[-2000:]


@pytest.mark.slow
def test_every_module_imports_alone():
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(_import_alone, MODULES))
    failed = [f"{name}:\n{err}" for name, rc, err in results if rc != 0]
    assert not failed, "\n".join(failed)


ARCHITECTURE = ROOT / "docs" / "architecture.md"


def module_map() -> list[str]:
    """The qcore modules in the order docs/architecture.md's module map lists them."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    block = text.split("## Module map", 1)[1].split("```", 2)[1]
    order: list[str] = []
    folders: list[tuple[int, str]] = []  # (indent, package) of the open folders
    for line in block.splitlines():
        stripped = line.lstrip()
        if not stripped:
            continue
        indent = len(line) - len(stripped)
        entry = stripped.split()[0]
        if not (entry.endswith(".py") or entry.endswith("/")):
            continue  # a continued description
        while folders and folders[-1][0] >= indent:
            folders.pop()
        parent = folders[-1][1] if folders else ""
        if entry.endswith("/"):
            package = f"{parent}.{entry[:-1]}" if parent else entry[:-1]
            folders.append((indent, package))
            if package.split(".")[0] == "qcore":
                order.append(package)
        elif parent.startswith("qcore"):
            order.append(f"{parent}.{entry[:-3]}")
    return order


def test_module_map_lists_every_module_in_import_order():
    order = module_map()
    missing, extra = sorted(set(MODULES) - set(order)), sorted(set(order) - set(MODULES))
    assert not (missing or extra), (f"docs/architecture.md's module map lacks {missing} and "
                                    f"lists {extra}, which qcore/ does not have")
    assert len(order) == len(MODULES), "docs/architecture.md lists a module twice"
    g = graph()
    position = {name: i for i, name in enumerate(order)}
    for name in order[1:]:  # qcore/__init__ (first) re-exports the API from below
        # a package's __init__ may re-export from its own modules, listed under it
        later = [t for t in g[name] if t in position and position[t] > position[name]
                 and not t.startswith(name + ".")]
        assert not later, f"docs/architecture.md lists {name} above {later}, which it imports"


APP = ROOT / "app"
PAGES = ROOT / "pages"
#: What a page may import from qcore itself: the engine's public API and the pure library
#: modules; the tools (the model tool and the report) only through app/.
TOOLS = ("qcore.model", "qcore.report")


def _imports_in(path: pathlib.Path, package: str) -> set[str]:
    """Every module the file imports, and every ``from`` import's module.name, absolute."""
    found = set()
    for base, names in _import_statements(path, package):
        found.add(base)
        found.update(f"{base}.{alias}" for alias in names)
    return found


def app_graph() -> dict[str, set[str]]:
    """app's modules -> the app modules each imports (deferred imports included)."""
    names = {f"app.{p.stem}" for p in APP.glob("*.py") if p.stem != "__init__"}
    return {f"app.{p.stem}": (_imports_in(p, "app") & names) - {f"app.{p.stem}"}
            for p in APP.glob("*.py") if p.stem != "__init__"}


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``g`` (its modules in order, the first repeated last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(g.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (c := visit(m)):
                return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(g):
        if n not in state and (c := visit(n)):
            return c
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_app_has_no_import_cycle():
    cycle = find_cycle(app_graph())
    assert cycle is None, "import cycle in app/: " + " -> ".join(cycle)


def test_pages_reach_the_tools_only_through_app():
    for page in sorted(PAGES.glob("*.py")):
        bad = sorted(t for t in _imports_in(page, "pages")
                     if any(t == tool or t.startswith(tool + ".") for tool in TOOLS))
        assert not bad, f"{page.name} imports {bad}: reach them through app/"


def test_the_model_tool_and_analysis_import_nothing_from_the_report():
    g = graph()
    for name in MODULES:
        if name == "qcore.analysis" or name.startswith("qcore.model"):
            bad = sorted(t for t in g[name] if t == "qcore.report" or t.startswith("qcore.report."))
            assert not bad, f"{name} imports {bad}: the report sits above it"
