"""Which top-level packages a module imports (the layer rules: models/ and parallel/ are torch- and jax-free)."""

import ast

FORBIDDEN = {"torch", "jax", "jaxlib", "flax"}


def imported_roots(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]
