"""The text encoder's bytes on the main rank while it encodes (released before the loop)."""

from __future__ import annotations

from .architecture import TEXT_LEN, meta_module


def text_encoder_bytes(text_cfg, prompts: int, negative: bool = True) -> tuple[int, int]:
    """(weights, activations) of UMT5 in bf16 on the main rank; activations ≈ the widest
    layer's working set (FFN: two d_ff projections) for every prompt and the negative (encoded
    only when some expert guides)."""
    from transformers import UMT5EncoderModel

    model = meta_module(lambda: UMT5EncoderModel(text_cfg))
    weights = sum(p.numel() for p in model.parameters()) * 2
    rows = prompts + int(negative)
    act = rows * TEXT_LEN * (3 * text_cfg.d_ff + 4 * text_cfg.d_model) * 2
    return weights, act
