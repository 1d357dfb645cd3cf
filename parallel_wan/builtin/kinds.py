"""The built-in tiny model's kinds and their architectures, without building anything: what
validation, the planner and the model store ask before (or instead of) loading it. No torch:
the server's HTTP process and a run's checks import this; builtin/tiny.py builds the model."""

from __future__ import annotations

from parallel_wan.models import registry
from parallel_wan.models.transformer_config import TransformerConfig

KINDS = ("t2v", "i2v", "ti2v")

# The tiny architectures live in the model registry beside the real ones; a kind names one.
ARCHITECTURE_OF_KIND = {"t2v": "tiny", "i2v": "tiny_i2v", "ti2v": "tiny_ti2v"}


def architecture(kind: str) -> registry.Architecture:
    if kind not in ARCHITECTURE_OF_KIND:
        raise ValueError(f"tiny model kind={kind!r} is not one of {list(KINDS)}")
    return registry.architecture(ARCHITECTURE_OF_KIND[kind])


def transformer_config(kind: str) -> TransformerConfig:
    """The tiny transformer's dimensions, without building anything (for early validation)."""
    return architecture(kind).transformer
