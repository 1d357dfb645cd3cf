"""The elementwise work around a DiT block's matmuls, written once against `ops`: what the ops
`norm_modulate`, `gated_residual` and `rms_norm_rope` mean (backends/ops_contract.py). A backend
binds these as its ops (JAX: XLA fuses them itself) or runs a fused kernel that equals them
within an ulp (torch on CUDA: backends/torch/fused.py)."""

from __future__ import annotations

from .rope import apply_rope


def norm_modulate(x, scale, shift, eps: float, ops):
    """LayerNorm (no affine) of x in float32, · (1 + scale) + shift, in x's dtype. scale and
    shift: float32, broadcastable against x (B, L, dim) — (B, 1, dim) or per token (B, L, dim)."""
    return ops.cast_like(ops.layer_norm(ops.cast(x, "float32"), eps=eps) * (1 + scale) + shift, x)


def gated_residual(x, y, gate, ops):
    """x + y · gate in float32, in x's dtype (the block's gated residual adds)."""
    return ops.cast_like(ops.cast(x, "float32") + ops.cast(y, "float32") * gate, x)


def rms_norm_rope(x, weight, eps: float, heads: int, cos, sin, ops):
    """RMSNorm of x (B, L, dim) over dim with `weight`, split into heads (B, L, heads, dim/heads)
    and rotated by RoPE's (cos, sin) tables (L, head_dim/2): Wan's QK norm across heads, then
    its rotary embedding."""
    b, length, dim = x.shape
    normed = ops.reshape(ops.rms_norm(x, weight, eps), (b, length, heads, dim // heads))
    return apply_rope(normed, cos, sin, ops)
