"""The run's model architecture, from its preset or its checkpoint's configs (no weights read),
and the transformer's parameters (the model's own table; the VAE's: models/vae_shapes.py)."""

from __future__ import annotations

import math

from ..config import RunSpec
from ..models.registry import (  # noqa: F401  (TEXT_LEN, UMT5_XXL: re-exported to the planner)
    TEXT_LEN,
    UMT5_XXL,
    architecture as registered,
)


def architecture(spec: RunSpec):
    """(TransformerConfig, VaeConfig, text encoder EncoderShape) of the run's model: from
    checkpoint_dir's configs when given, else the model registry's architecture the preset names."""
    from ..text.encoder_shape import EncoderShape

    if spec.weights.checkpoint_dir is not None:
        from ..weights.layout import describe_checkpoint

        ckpt = describe_checkpoint(spec.weights.checkpoint_dir)
        text = EncoderShape.from_config(UMT5_XXL)
        if ckpt.text_encoder_format == "diffusers":
            text = EncoderShape.from_config_file(ckpt.text_encoder_path / "config.json")
        return next(iter(ckpt.transformers.values())), ckpt.vae_config, text
    arch = registered(spec.model.architecture)
    text = dict(arch.text_encoder)
    if arch.builtin:  # the tiny text encoder's vocabulary follows the built-in tokenizer
        from ..builtin import tiny

        text["vocab_size"] = 8 * math.ceil(tiny.tokenizer_size() / 8)
    return arch.transformer, arch.vae, EncoderShape.from_config(text)


def transformer_shapes(tcfg) -> dict:
    """Diffusers name → shape of every parameter of one expert: the model's own table
    (models/transformer_shapes.py), the names and shapes a checkpoint of this config holds."""
    from ..models.transformer_shapes import param_shapes

    return param_shapes(tcfg)
