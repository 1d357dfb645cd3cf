"""Which tensors quantized weights touch: the transformer blocks' linear weights, by diffusers
name. Plain names (no torch), so the memory planner's cheap bound and the settings checks can
ask without importing torch; weights/quantize.py holds the arithmetic."""

from __future__ import annotations

import re

# diffusers names of the block linears' weights (to_qkv is the fused form of to_q/k/v)
_QUANTIZABLE = re.compile(
    r"^blocks\.\d+\.(attn1\.(to_q|to_k|to_v|to_qkv|to_out\.0)|attn2\.(to_q|to_k|to_v|to_out\.0)"
    r"|ffn\.net\.0\.proj|ffn\.net\.2)\.weight$"
)


def quantizable(name: str) -> bool:
    """True for the diffusers name of a block linear's weight (the only tensors quantized)."""
    return bool(_QUANTIZABLE.match(name))
