"""The layers hold: no import from a lower layer up to a higher one, no import circle, every module in a layer.

The graph is read from the sources (every import, also inside functions and under TYPE_CHECKING), so
an arrow that only a type checker follows counts as much as one that runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("difftest", "strategies", "mutants", "executors")
# lowest first: a module may import its own layer and the layers before it, never one after it
LAYERS = (
    "difftest.base",
    "difftest.spec",
    "difftest.history",
    "difftest.judge",
    "difftest.servers",
    "executors",  # each executor's host (executors/*/adapter.py): the spec's calls as its commands
    "difftest.replay",
    "difftest.coverage",
    "difftest.findings",
    "strategies",
    "difftest.campaign",
    "difftest.report",
    "mutants",
    "difftest.fuzz",
    "difftest.cli",
    "difftest.__main__",
)


def module_files() -> dict[str, Path]:
    """Every module of the project's packages, by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "target" in path.relative_to(ROOT).parts:
                continue  # cargo's build trees
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imported(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `module` imports (the deepest known module each import names)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
    return targets


def layer_of(module: str) -> int | None:
    """The index of `module`'s layer in LAYERS, or None for a package's own root (difftest)."""
    for index, layer in enumerate(LAYERS):
        if module == layer or module.startswith(layer + "."):
            return index
    return None


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {module: imported(module, path, modules) for module, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_is_in_a_layer() -> None:
    loose = [m for m in module_files() if layer_of(m) is None and m not in PACKAGES[:1]]
    assert not loose, f"modules outside every layer of tests/test_layers.py's LAYERS: {loose}"


def test_no_import_goes_up_a_layer() -> None:
    upward = []
    for module, targets in import_graph().items():
        source = layer_of(module)
        for target in targets:
            destination = layer_of(target)
            if source is not None and destination is not None and destination > source:
                upward.append(f"{module} -> {target} ({LAYERS[source]} imports {LAYERS[destination]})")
    assert not upward, "imports from a lower layer up:\n" + "\n".join(sorted(upward))


def test_no_import_circle() -> None:
    found = cycles(import_graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize("layer", [layer for layer in LAYERS if (ROOT / layer.replace(".", "/")).is_dir()])
def test_each_layer_says_what_it_is(layer: str) -> None:
    init = ROOT / layer.replace(".", "/") / "__init__.py"
    assert init.exists(), f"{layer} has no __init__.py"
    docstring = ast.get_docstring(ast.parse(init.read_text()))
    assert docstring, f"{init} does not open with what the layer is"


def test_the_check_sees_an_upward_arrow_and_a_circle() -> None:
    """The check itself can fail: a planted upward arrow and a planted circle are found."""
    graph = {"difftest.spec.a": {"difftest.replay.b"}, "difftest.replay.b": {"difftest.spec.a"}}
    assert cycles(graph) == [["difftest.replay.b", "difftest.spec.a"]]
    layer_a, layer_b = layer_of("difftest.spec.a"), layer_of("difftest.replay.b")
    assert layer_a is not None and layer_b is not None and layer_b > layer_a


if __name__ == "__main__":  # the figures for a note: modules, arrows, arrows up
    graph = import_graph()
    arrows = sum(len(t) for t in graph.values())
    print(f"{len(graph)} modules, {arrows} import arrows, {len(cycles(graph))} circles")
