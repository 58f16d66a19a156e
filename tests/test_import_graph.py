"""The shape of the library: no import cycle among memory_core modules, no Prefect in it.

Read from the source (ast), not from ``sys.modules``, so an import hidden inside a function
counts as much as one at the top: a cycle that only works because one side imports late is
still a cycle a reader has to untangle. Imports under ``if TYPE_CHECKING:`` never run and are
left out. ``from pkg import name`` where ``pkg`` exports ``name`` lazily
(``stages/_exports.py``) counts as an import of the module that defines it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _modules(package: str) -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _lazy_exports(tree: ast.Module) -> dict[str, str]:
    """{name: submodule} of a package ``__init__`` that calls ``lazy_exports``."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "lazy_exports"
            and len(node.args) == 2
        ):
            table = ast.literal_eval(node.args[1])
            return {name: module for module, names in table.items() for name in names}
    return {}


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.Module) -> list[tuple[str, list[str]]]:
    """(module, names) of every absolute import that runs, at any depth."""
    found: list[tuple[str, list[str]]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking(child):
                continue
            if isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                found.append((child.module, [a.name for a in child.names]))
            elif isinstance(child, ast.Import):
                found.extend((a.name, []) for a in child.names)
            visit(child)

    visit(tree)
    return found


def import_graph(package: str = "memory_core") -> dict[str, set[str]]:
    modules = _modules(package)
    trees = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in modules.items()}
    lazy = {name: _lazy_exports(tree) for name, tree in trees.items()}
    graph: dict[str, set[str]] = {}
    for name, tree in trees.items():
        deps = set()
        for module, names in _imports(tree):
            for imported in names or [""]:
                sub = f"{module}.{imported}"
                if sub in modules:
                    deps.add(sub)
                elif imported in lazy.get(module, {}):
                    deps.add(f"{module}.{lazy[module][imported]}")
                elif module in modules:
                    deps.add(module)
        deps.discard(name)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
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
    return found


def test_no_import_cycle_among_memory_core_modules():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_graph_sees_imports_inside_functions_and_through_lazy_exports():
    graph = import_graph()
    # compact/stage.py deletes episodes it folded with the purge primitive of forget
    assert "memory_core.stages.forget.purge" in graph["memory_core.stages.compact.stage"]
    # eval/probes.py imports forget_subject from the forget package (a lazy export)
    assert "memory_core.stages.forget.stage" in graph["memory_core.eval.probes"]
