"""No module of parallel_wan imports itself through others — counting imports inside functions
too, since a function-level import is the usual way to hide a cycle rather than remove it."""

from __future__ import annotations

import ast
import os

from parallel_wan.run import CONF_DIR

PACKAGE = os.path.join(os.path.dirname(CONF_DIR), "parallel_wan")


def module_files() -> dict[str, str]:
    """Dotted module name → file, for every module and package of parallel_wan."""
    files = {}
    root = os.path.dirname(PACKAGE)
    for folder, _, names in os.walk(PACKAGE):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
                files[dotted.removesuffix(".__init__")] = path
    return files


def imports_of(module: str, path: str, known: dict) -> set[str]:
    """The parallel_wan modules `module` imports anywhere in its file ("from .x import y" counts
    as importing module x.y when that is a module, else x)."""
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                name = f"{base}.{alias.name}"
                found.add(name if name in known else base)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in known and m != module}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycles():
    known = module_files()
    graph = {m: imports_of(m, path, known) for m, path in known.items()}
    assert len(graph) > 50 and graph["parallel_wan.sampling.scheduler_config"] >= {"parallel_wan.sampling.schedules"}
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    # The shape of the cycle this test was written for: schedules ↔ scheduler_config.
    assert cycles({"a": {"b"}, "b": {"a", "c"}, "c": set()}) == [["a", "b"]]
