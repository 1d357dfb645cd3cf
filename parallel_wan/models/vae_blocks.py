"""The Wan VAE's building blocks shared by encoder and decoder: RMS norm, residual block,
single-head spatial attention and the middle block. Arrays are channels-first
(B, C, T, H, W); parameter names are diffusers' (WanResidualBlock, WanAttentionBlock, …)."""

from __future__ import annotations

from .vae_causal import Array, TimeCache, causal_conv3d

_HALF_PRECISION = ("bfloat16", "float16")


def rms_norm(x, gamma, ops) -> Array:
    """L2-normalise over channels (axis 1), times √C and a per-channel gain.

    This is F.normalize (x / max(‖x‖, 1e-12)), not torch's RMSNorm: no eps inside the root.
    diffusers normalises half-precision inputs in float32 and casts back; we do the same.
    """
    dtype = ops.dtype_name(x)
    xf = ops.cast(x, "float32") if dtype in _HALF_PRECISION else x
    normalized = ops.l2_normalize(xf, axis=1)
    if dtype in _HALF_PRECISION:
        normalized = ops.cast(normalized, dtype)
    return normalized * (x.shape[1] ** 0.5) * gamma


def residual_block(p, x, ops, cache: TimeCache, name: str) -> Array:
    shortcut = x
    if "conv_shortcut" in p:  # 1×1×1, only where the channel count changes
        shortcut = causal_conv3d(p["conv_shortcut"], x, ops, cache, f"{name}.conv_shortcut")
    x = ops.silu(rms_norm(x, p["norm1"]["gamma"], ops))
    x = causal_conv3d(p["conv1"], x, ops, cache, f"{name}.conv1")
    x = ops.silu(rms_norm(x, p["norm2"]["gamma"], ops))
    x = causal_conv3d(p["conv2"], x, ops, cache, f"{name}.conv2")
    return x + shortcut


def attention_block(p, x, ops) -> Array:
    """One-head self-attention over the pixels of each frame separately (frames never mix,
    which keeps the block causal)."""
    b, c, t, h, w = x.shape
    frames = ops.reshape(ops.transpose(x, (0, 2, 1, 3, 4)), (b * t, c, h, w))
    frames = rms_norm(frames, p["norm"]["gamma"], ops)
    qkv = ops.conv2d(frames, p["to_qkv"]["weight"], p["to_qkv"].get("bias"))
    qkv = ops.transpose(ops.reshape(qkv, (b * t, 3 * c, h * w)), (0, 2, 1))  # (bt, hw, 3c)
    # Flattening and unflattening materialises the channels-last layout, as the reference's
    # `.contiguous()` does: torch's CPU attention kernel rounds differently on a strided view
    # (≈6e-7 here, amplified to ≈1e-6 at the decoder output).
    qkv = ops.reshape(ops.reshape(qkv, (b * t, h * w * 3 * c)), (b * t, h * w, 3 * c))
    q, k, v = (ops.expand_dims(part, 2) for part in ops.split(qkv, 3, axis=2))  # (bt, hw, 1 head, c)
    out = ops.reshape(ops.attention(q, k, v), (b * t, h * w, c))
    out = ops.reshape(ops.transpose(out, (0, 2, 1)), (b * t, c, h, w))
    out = ops.conv2d(out, p["proj"]["weight"], p["proj"].get("bias"))
    out = ops.transpose(ops.reshape(out, (b, t, c, h, w)), (0, 2, 1, 3, 4))
    return out + x


def mid_block(p, x, ops, cache: TimeCache, name: str) -> Array:
    """resnet, then (attention, resnet) pairs."""
    x = residual_block(p["resnets"][0], x, ops, cache, f"{name}.resnets.0")
    for i, attention in enumerate(p["attentions"]):
        x = attention_block(attention, x, ops)
        x = residual_block(p["resnets"][i + 1], x, ops, cache, f"{name}.resnets.{i + 1}")
    return x
