"""Flat state dicts ("blocks.0.attn1.to_q.weight") ↔ nested param trees.

A param tree is nested dicts keyed by the diffusers module names; a run of numeric keys
("blocks.0", "blocks.1", …) becomes a list, so the model indexes `params["blocks"][i]` and
`ops.scan_layers` can walk (torch) or stack (JAX) the layers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any


def unflatten(flat: Mapping[str, Any]) -> dict:
    root: dict = {}
    for key, value in flat.items():
        parts = key.split(".")
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return _lists_from_numeric_keys(root)


def _lists_from_numeric_keys(node):
    if not isinstance(node, dict):
        return node
    node = {k: _lists_from_numeric_keys(v) for k, v in node.items()}
    if node and all(k.isdigit() for k in node):
        # Gaps are parameterless modules (diffusers' `ffn.net.1` is a Dropout): keep the
        # positions so `net[2]` still means what the checkpoint name says.
        return [node.get(str(i)) for i in range(max(int(k) for k in node) + 1)]
    return node


def flatten(tree, prefix: str = "") -> dict:
    return dict(iter_leaves(tree, prefix))


def iter_leaves(tree, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(tree, dict):
        items = tree.items()
    elif isinstance(tree, (list, tuple)):
        items = ((str(i), v) for i, v in enumerate(tree))
    elif tree is None:
        return
    else:
        yield prefix, tree
        return
    for k, v in items:
        yield from iter_leaves(v, f"{prefix}.{k}" if prefix else k)


def map_leaves(fn: Callable[[str, Any], Any], tree, prefix: str = ""):
    """Rebuild `tree` with each leaf replaced by fn(flat_name, leaf)."""
    if isinstance(tree, dict):
        return {k: map_leaves(fn, v, f"{prefix}.{k}" if prefix else k) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [
            None if v is None else map_leaves(fn, v, f"{prefix}.{i}" if prefix else str(i)) for i, v in enumerate(tree)
        ]
    return fn(prefix, tree)
