"""The text encoder's bytes on the main rank while it encodes (released before the loop)."""

from __future__ import annotations

from .architecture import TEXT_LEN


def text_encoder_bytes(text_cfg, prompts: int, negative: bool = True) -> tuple[int, int]:
    """(weights, activations) of UMT5 in bf16 on the main rank; activations ≈ the widest
    layer's working set (FFN: two d_ff projections) for every prompt and the negative (encoded
    only when some expert guides)."""
    weights = umt5_parameters(text_cfg) * 2
    rows = prompts + int(negative)
    act = rows * TEXT_LEN * (3 * text_cfg.d_ff + 4 * text_cfg.d_model) * 2
    return weights, act


def umt5_parameters(s) -> int:
    """UMT5's parameter count from its EncoderShape (text/umt5_encoder.py, one embedding table):
    per block four attention projections, a relative-position table, three FFN matrices and two
    norms; then the final norm. tests/unit/test_plan.py checks it against the module's own count."""
    inner = s.num_heads * s.d_kv
    block = (
        4 * s.d_model * inner + s.relative_attention_num_buckets * s.num_heads + 3 * s.d_model * s.d_ff + 2 * s.d_model
    )
    return s.vocab_size * s.d_model + s.num_layers * block + s.d_model
