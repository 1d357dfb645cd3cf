"""Which tensors quantized weights touch, by diffusers name: the transformer blocks' linear
weights, and the names of each one's scale (and NVFP4's global scale). Plain names (no torch), so the memory
planner's cheap bound and the settings checks can ask without importing torch; form.py holds
the arithmetic."""

from __future__ import annotations

import re

# diffusers names of the block linears' weights (to_qkv is the fused form of to_q/k/v)
_QUANTIZABLE = re.compile(
    r"^blocks\.\d+\.(attn1\.(to_q|to_k|to_v|to_qkv|to_out\.0)|attn2\.(to_q|to_k|to_v|to_out\.0)"
    r"|ffn\.net\.0\.proj|ffn\.net\.2)\.weight$"
)
SCALE_SUFFIX = "_scale"  # "<layer>.weight" → "<layer>.weight_scale"
GLOBAL_SUFFIX = "_scale_2"  # NVFP4's float32 global scale: "<layer>.weight_scale_2" (ComfyUI's name)


def quantizable(name: str) -> bool:
    """True for the diffusers name of a block linear's weight (the only tensors quantized)."""
    return bool(_QUANTIZABLE.match(name))


def scale_name(weight_name: str) -> str:
    return weight_name + SCALE_SUFFIX


def global_scale_name(weight_name: str) -> str:
    return weight_name + GLOBAL_SUFFIX


def is_scale(name: str) -> bool:
    """The name of a quantized weight's scale (`…weight_scale`, NVFP4's `…weight_scale_2`)."""
    return any(name.endswith(".weight" + s) or name == "weight" + s for s in (SCALE_SUFFIX, GLOBAL_SUFFIX))
