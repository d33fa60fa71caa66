"""Imports in helpers/ run one way: no cycle between the course's modules, counting imports inside functions too
(a lazy import that dodges a cycle is still a cycle), and no module re-exports another's functions."""

from __future__ import annotations

import ast
from pathlib import Path

HELPERS = Path(__file__).resolve().parents[1] / "helpers"


def course_imports() -> dict[str, set[str]]:
    """Module → the course modules it imports (relative imports, anywhere in the file)."""
    graph: dict[str, set[str]] = {}
    for path in HELPERS.glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps.add(node.module.split(".")[0])
                else:
                    deps.update(alias.name for alias in node.names)
        graph[path.stem] = deps - {path.stem}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep) :] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle_in_helpers():
    graph = course_imports()
    graph.pop("__init__", None)  # the package imports its modules; they never import it
    assert "verdict" in graph["plotting"]
    assert "timing" in graph["verdict"]  # the scan sees imports
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in helpers/: " + " → ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_re_exports_another():
    for path in HELPERS.glob("*.py"):
        assert "re-export" not in path.read_text(), f"{path.name} re-exports: import each function from its home"
