"""The built-in tiny model's kinds and their architectures, without building anything: what
validation, the planner and the model store ask before (or instead of) loading it. No torch:
the server's HTTP process and a run's checks import this; builtin/tiny.py builds the model."""

from __future__ import annotations

from parallel_wan.models import registry
from parallel_wan.models.transformer_config import TransformerConfig

KINDS = ("t2v", "i2v", "ti2v")

# The tiny architectures live in the model registry beside the real ones; a kind names one (the
# tests' word for them). A run names the architecture itself (its preset's `architecture`).
ARCHITECTURE_OF_KIND = {"t2v": "tiny", "i2v": "tiny_i2v", "ti2v": "tiny_ti2v"}


def architecture(kind: str) -> registry.Architecture:
    """The built-in architecture of a kind (t2v, i2v, ti2v) or of that name (tiny, …)."""
    name = ARCHITECTURE_OF_KIND.get(kind, kind)
    arch = registry.ARCHITECTURES.get(name)
    if arch is None or not arch.builtin:
        builtin = sorted(n for n, a in registry.ARCHITECTURES.items() if a.builtin)
        raise ValueError(f"tiny model kind={kind!r} is not one of {list(KINDS)} nor a built-in architecture {builtin}")
    return arch


def transformer_config(kind: str) -> TransformerConfig:
    """The tiny transformer's dimensions, without building anything (for early validation)."""
    return architecture(kind).transformer
