"""Small facts with one home (issue 39, item 7): FP8's largest value and the per-row absmax scale
live in weights/quantized/scales.py, and every atomic JSON file is written by report/outputs.py's
`write_json` — a second copy anywhere in the package fails here, naming its file."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "parallel_wan"
FORM = PACKAGE / "weights" / "quantized" / "scales.py"
JSON_WRITER = PACKAGE / "report" / "outputs.py"


def _trees():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text())


def _calls(tree, owner: str, attr: str) -> int:
    return sum(
        1
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == attr
        and (owner == "" or (isinstance(node.func.value, ast.Name) and node.func.value.id == owner))
    )


def test_fp8_max_and_the_row_absmax_are_written_once():
    sites = {"448": [], "amax": []}
    for path, tree in _trees():
        if any(isinstance(n, ast.Constant) and n.value == 448 for n in ast.walk(tree)):
            sites["448"].append(path.relative_to(PACKAGE))
        if _calls(tree, "", "amax"):
            sites["amax"].append(path.relative_to(PACKAGE))
    home = FORM.relative_to(PACKAGE)
    assert sites == {"448": [home], "amax": [home]}


def test_fp8_activations_take_the_weights_row_rule():
    torch = pytest.importorskip("torch")
    from parallel_wan.backends.torch.fp8_gemm import activation_scales
    from parallel_wan.weights.quantized.form import quantize_rows

    x = torch.randn(6, 32, dtype=torch.bfloat16)
    x[2] = 0  # an all-zero row: scale 1
    q, scale = activation_scales(x)
    want_q, want_scale = quantize_rows(x, "fp8")
    assert torch.equal(scale, want_scale) and torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))


def _writes_a_json_file(tree) -> bool:
    """json.dump into a file, or a file's write_text(json.dumps(…)) — not a JSON header inside
    another format (safetensors' metadata)."""
    if _calls(tree, "json", "dump"):
        return True
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "write_text"
        and any(_calls(arg, "json", "dumps") for arg in node.args)
        for node in ast.walk(tree)
    )


def test_json_files_are_written_atomically_in_one_place():
    writers = [
        path.relative_to(PACKAGE)
        for path, tree in _trees()
        if _calls(tree, "os", "replace") and _writes_a_json_file(tree)
    ]
    assert writers == [JSON_WRITER.relative_to(PACKAGE)]


def test_the_quantized_names_import_without_torch(monkeypatch):
    # the memory planner's bound and the settings checks ask which tensors are quantized, torch-free
    import importlib

    for name in list(sys.modules):
        if name.startswith("parallel_wan.weights"):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "torch", None)
    names = importlib.import_module("parallel_wan.weights.quantized.names")
    assert names.quantizable("blocks.3.attn1.to_q.weight") and not names.quantizable("head.head.weight")
    assert names.scale_name("blocks.0.ffn.net.2.weight") == "blocks.0.ffn.net.2.weight_scale"
