"""The layering in docs/architecture.md: `parallel_wan/models/` is backend-agnostic math."""

import pathlib

from harness.imports import FORBIDDEN, imported_roots

MODELS = pathlib.Path(__file__).resolve().parents[2] / "parallel_wan" / "models"


def test_models_import_neither_torch_nor_jax():
    files = sorted(MODELS.glob("*.py"))
    assert len(files) >= 5
    offenders = {str(p.name): sorted(set(imported_roots(p)) & FORBIDDEN) for p in files}
    assert not {k: v for k, v in offenders.items() if v}, offenders


def test_models_package_imports_without_torch(monkeypatch):
    # Importing every models module with torch and jax made unimportable proves no lazy import hides there.
    import importlib
    import sys

    for name in list(sys.modules):
        if name.startswith("parallel_wan.models"):
            monkeypatch.delitem(sys.modules, name)
    for banned in FORBIDDEN:
        monkeypatch.setitem(sys.modules, banned, None)
    for path in sorted(MODELS.glob("*.py")):
        importlib.import_module(
            f"parallel_wan.models.{path.stem}" if path.stem != "__init__" else "parallel_wan.models"
        )
