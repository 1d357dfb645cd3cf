"""The Wan 2.2 DiT, written once against an `ops` namespace.

Latents travel as patch tokens: (batch, tokens, patch_volume × channels), each token's vector
ordered (pt, ph, pw, channel) — the order the output projection produces, so the sampler's
elementwise update applies to model input and output alike and a rank can hold any slice of
the tokens. Only self-attention mixes tokens; it is the `self_attention` callable, which the
backend makes sequence-parallel. Casts follow diffusers' WanTransformer3DModel: norms and
modulation in float32, everything else in the weights' dtype.

The blocks' linear layers go through `ops.dense(x, layer)` with the layer's whole param dict
(weight, bias, and whatever else the backend placed there: a quantized weight's
`weight_scale`), so how a stored weight becomes a product is the backend's business, not the
model's; the embedders and the head keep `ops.linear` (never quantized, as the references keep them).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .transformer_config import TransformerConfig

# diffusers' `_keep_in_fp32_modules`: a parameter stays float32 when any dotted part of its
# name is one of these (the cross-attention norm is `norm2`, with affine weights; Animate's
# motion basis is orthonormalised from `motion_synthesis_weight` in float32 or wider).
FP32_MODULES = frozenset({"time_embedder", "scale_shift_table", "norm1", "norm2", "norm3", "motion_synthesis_weight"})


def keeps_fp32(name: str) -> bool:
    return any(part in FP32_MODULES for part in name.split("."))


# ---------------------------------------------------------------- patch tokens
def patch_grid(cfg: TransformerConfig, latent_shape) -> tuple[int, int, int]:
    """Token grid (frames, height, width) of a latent (…, T, H, W)."""
    pt, ph, pw = cfg.patch_size
    t, h, w = latent_shape[-3:]
    return t // pt, h // ph, w // pw


def patchify(x, patch_size, ops):
    """(B, C, T, H, W) → (B, tokens, pt·ph·pw·C)."""
    b, c, t, h, w = x.shape
    pt, ph, pw = patch_size
    x = ops.reshape(x, (b, c, t // pt, pt, h // ph, ph, w // pw, pw))
    x = ops.transpose(x, (0, 2, 4, 6, 3, 5, 7, 1))
    return ops.reshape(x, (b, (t // pt) * (h // ph) * (w // pw), pt * ph * pw * c))


def unpatchify(tokens, grid, patch_size, ops):
    """(B, tokens, pt·ph·pw·C) → (B, C, T, H, W); the inverse of `patchify`."""
    b = tokens.shape[0]
    f, h, w = grid
    pt, ph, pw = patch_size
    c = tokens.shape[-1] // (pt * ph * pw)
    x = ops.reshape(tokens, (b, f, h, w, pt, ph, pw, c))
    x = ops.transpose(x, (0, 7, 1, 4, 2, 5, 3, 6))
    return ops.reshape(x, (b, c, f * pt, h * ph, w * pw))


def join_channels(token_sets, patch_size, ops):
    """Concatenate patch tokens of several latents along channels (noise ‖ I2V condition), as
    the reference concatenates the latents before patchifying."""
    volume = math.prod(patch_size)
    b, l = token_sets[0].shape[:2]
    parts = [ops.reshape(t, (b, l, volume, t.shape[-1] // volume)) for t in token_sets]
    joined = ops.concat(parts, axis=-1)
    return ops.reshape(joined, (b, l, joined.shape[-2] * joined.shape[-1]))


def embed_patches(params, tokens, cfg: TransformerConfig, ops):
    """The patch-embedding Conv3d (kernel = stride = patch) as a matmul on patch tokens."""
    w = params["patch_embedding"]["weight"]  # (dim, C, pt, ph, pw)
    dim, c = w.shape[0], w.shape[1]
    w = ops.reshape(ops.transpose(w, (0, 2, 3, 4, 1)), (dim, math.prod(cfg.patch_size) * c))
    return ops.linear(ops.cast_like(tokens, w), w, params["patch_embedding"]["bias"])


# ---------------------------------------------------------------- conditioning
def timestep_features(timestep, freq_dim: int, ops):
    """Sinusoidal features [cos | sin] of (…,) timesteps → (…, freq_dim), float32 (diffusers'
    `Timesteps(flip_sin_to_cos=True, downscale_freq_shift=0)`)."""
    half = freq_dim // 2
    exponent = ops.asarray(-math.log(10000.0) * np.arange(half, dtype=np.float32) / half, "float32", like=timestep)
    args = ops.expand_dims(ops.cast(timestep, "float32"), -1) * ops.exp(exponent)
    return ops.concat([ops.cos(args), ops.sin(args)], axis=-1)


def condition(params, timestep, context, cfg: TransformerConfig, ops):
    """Timestep (B,) or per-token (B, L) and text context (B, text_len, text_dim) →
    temb (…, dim), the six modulation vectors (…, 6, dim), and the embedded context."""
    ce = params["condition_embedder"]
    te = ce["time_embedder"]
    feats = timestep_features(timestep, cfg.freq_dim, ops)
    feats = ops.cast_like(feats, te["linear_1"]["weight"])
    temb = ops.linear(
        ops.silu(ops.linear(feats, te["linear_1"]["weight"], te["linear_1"]["bias"])),
        te["linear_2"]["weight"],
        te["linear_2"]["bias"],
    )
    temb = ops.cast_like(temb, context)
    proj = ops.linear(ops.silu(temb), ce["time_proj"]["weight"], ce["time_proj"]["bias"])
    proj = ops.reshape(proj, tuple(proj.shape[:-1]) + (6, cfg.dim))
    tx = ce["text_embedder"]
    ctx = ops.linear(context, tx["linear_1"]["weight"], tx["linear_1"]["bias"])
    ctx = ops.linear(ops.gelu(ctx, approximate=True), tx["linear_2"]["weight"], tx["linear_2"]["bias"])
    return temb, proj, ctx


class TokenParts(NamedTuple):
    """Modulation rows for two stretches of the sequence (S2V): tokens [0, first) take row 0 of
    `proj` (B = 2, 6, dim) — the timestep's — and the rest row 1 (t = 0: the reference and
    motion tokens, which are never denoised). Applied stretch by stretch, as the official model
    does: no (L, 6, dim) per-token table. `first` may instead be a per-token boolean array
    (L,), True on the row-0 tokens (a traced shard whose split is not known when traced: JAX)."""

    proj: object
    first: object


def _modulation(table, proj, ops):
    """table (1, n, dim) + proj (B, n, dim) or per-token (B, L, n, dim) → n vectors, each
    broadcastable against hidden states (B, L, dim); with TokenParts, n pairs of vectors
    (TokenParts of (1, 1, dim) rows) that `_modulate` and `_gated` apply stretch by stretch."""
    if isinstance(proj, TokenParts):
        rows = [table + ops.cast(proj.proj[r : r + 1], "float32") for r in range(2)]
        return [TokenParts((rows[0][:, i : i + 1], rows[1][:, i : i + 1]), proj.first) for i in range(table.shape[1])]
    if proj.ndim == 4:
        mod = ops.expand_dims(table, 0) + ops.cast(proj, "float32")
        return [mod[:, :, i] for i in range(table.shape[1])]
    mod = table + ops.cast(proj, "float32")
    return [mod[:, i : i + 1] for i in range(table.shape[1])]


def _stretches(x, parts: TokenParts, fn, ops):
    """fn(stretch of x, row) for the two stretches of TokenParts, joined along the tokens; with
    a per-token mask, both rows' results selected token by token."""
    first = parts.first
    if not isinstance(first, int):
        return ops.where(ops.expand_dims(ops.expand_dims(first, 0), -1), fn(x, 0), fn(x, 1))
    if first >= x.shape[1]:
        return fn(x, 0)
    if first <= 0:
        return fn(x, 1)
    return ops.concat([fn(x[:, :first], 0), fn(x[:, first:], 1)], axis=1)


def _modulate(h, scale, shift, ops):
    """h · (1 + scale) + shift, per stretch under TokenParts."""
    if isinstance(scale, TokenParts):
        return _stretches(h, scale, lambda part, r: part * (1 + scale.proj[r]) + shift.proj[r], ops)
    return h * (1 + scale) + shift


def _gated(y, gate, ops):
    """y · gate, per stretch under TokenParts."""
    if isinstance(gate, TokenParts):
        return _stretches(y, gate, lambda part, r: part * gate.proj[r], ops)
    return y * gate


def _norm_modulated(x, scale, shift, eps, ops):
    """LayerNorm of x in float32, modulated, in x's dtype: one op (`ops.norm_modulate`, a fused
    kernel where the backend has one) unless the modulation changes along the tokens in stretches."""
    if isinstance(scale, TokenParts):
        return ops.cast_like(_modulate(ops.layer_norm(ops.cast(x, "float32"), eps=eps), scale, shift, ops), x)
    return ops.norm_modulate(x, scale, shift, eps)


def _gated_residual(x, y, gate, ops):
    """x + y · gate in float32, in x's dtype: one op (`ops.gated_residual`) as above."""
    if isinstance(gate, TokenParts):
        return ops.cast_like(ops.cast(x, "float32") + _gated(ops.cast(y, "float32"), gate, ops), x)
    return ops.gated_residual(x, y, gate)


# ---------------------------------------------------------------- attention
def _heads(x, heads, ops):
    b, l, d = x.shape
    return ops.reshape(x, (b, l, heads, d // heads))


def _merge_heads(x, ops):
    b, l, h, d = x.shape
    return ops.reshape(x, (b, l, h * d))


def _self_qkv(p, x, ops):
    """q, k, v projections of x. A backend may fuse the three weights into one `to_qkv`
    (out = 3·dim, rows q ‖ k ‖ v; backends/torch/qkv_fusion.fuse_qkv): one GEMM reads x once
    and runs at a larger, more efficient size; the split is exact."""
    if "to_qkv" in p:
        return ops.split(ops.dense(x, p["to_qkv"]), 3, axis=-1)
    return [ops.dense(x, p[n]) for n in ("to_q", "to_k", "to_v")]


def self_attention_block(p, x, rope, cfg: TransformerConfig, ops, attention):
    q, k, v = _self_qkv(p, x, ops)
    heads = cfg.num_attention_heads
    cos, sin = rope
    # QK norm across heads, then RoPE: one op each (a fused kernel where the backend has one)
    q = ops.rms_norm_rope(q, p["norm_q"]["weight"], cfg.eps, heads, cos, sin)
    k = ops.rms_norm_rope(k, p["norm_k"]["weight"], cfg.eps, heads, cos, sin)
    out = ops.cast_like(_merge_heads(attention(q, k, _heads(v, heads, ops)), ops), q)
    return ops.dense(out, p["to_out"][0])


def _context_attention(q, context, to_k, to_v, norm_k, cfg: TransformerConfig, ops):
    k = ops.rms_norm(ops.dense(context, to_k), norm_k["weight"], cfg.eps)
    v = ops.dense(context, to_v)
    heads = cfg.num_attention_heads
    out = ops.attention(_heads(q, heads, ops), _heads(k, heads, ops), _heads(v, heads, ops))
    return ops.cast_like(_merge_heads(out, ops), q)


def cross_attention_block(p, x, context, cfg: TransformerConfig, ops):
    """Cross-attention to the text; with an image context as well (Wan 2.1-style image
    conditioning, Animate-14B: `context` = (image tokens, text tokens) and the layer has
    `add_k_proj`/`add_v_proj`), the same queries attend to each and the two results are summed."""
    q = ops.rms_norm(ops.dense(x, p["to_q"]), p["norm_q"]["weight"], cfg.eps)
    if isinstance(context, tuple):
        image, text = context
        out = _context_attention(q, text, p["to_k"], p["to_v"], p["norm_k"], cfg, ops)
        out = out + _context_attention(q, image, p["add_k_proj"], p["add_v_proj"], p["norm_added_k"], cfg, ops)
    else:
        out = _context_attention(q, context, p["to_k"], p["to_v"], p["norm_k"], cfg, ops)
    return ops.dense(out, p["to_out"][0])


# ---------------------------------------------------------------- blocks
def transformer_block(p, x, context, proj, rope, cfg: TransformerConfig, ops, attention):
    shift, scale, gate, c_shift, c_scale, c_gate = _modulation(p["scale_shift_table"], proj, ops)
    h = _norm_modulated(x, scale, shift, cfg.eps, ops)
    x = _gated_residual(x, self_attention_block(p["attn1"], h, rope, cfg, ops, attention), gate, ops)

    if cfg.cross_attn_norm:
        h = ops.cast_like(ops.layer_norm(ops.cast(x, "float32"), p["norm2"]["weight"], p["norm2"]["bias"], cfg.eps), x)
    else:
        h = x
    x = x + cross_attention_block(p["attn2"], h, context, cfg, ops)

    h = _norm_modulated(x, c_scale, c_shift, cfg.eps, ops)
    ffn = p["ffn"]["net"]
    ff = ops.gelu(ops.dense(h, ffn[0]["proj"]), approximate=True)
    return _gated_residual(x, ops.dense(ff, ffn[2]), c_gate, ops)


def output_head(params, x, temb, cfg: TransformerConfig, ops):
    table = params["scale_shift_table"]  # (1, 2, dim)
    temb_axis = ops.expand_dims(temb, -2)  # (B, 1, dim) or (B, L, 1, dim)
    if temb.ndim == 3:
        mod = ops.expand_dims(table, 0) + temb_axis
        shift, scale = mod[:, :, 0], mod[:, :, 1]
    else:
        mod = table + temb_axis
        shift, scale = mod[:, 0:1], mod[:, 1:2]
    h = ops.cast_like(ops.layer_norm(ops.cast(x, "float32"), eps=cfg.eps) * (1 + scale) + shift, x)
    return ops.linear(h, params["proj_out"]["weight"], params["proj_out"]["bias"])


def forward(params, tokens, timestep, context, rope, cfg: TransformerConfig, ops, attention, run_blocks=None):
    """Noise prediction for patch tokens.

    tokens: (B, L, pt·ph·pw·in_channels) — this rank's tokens, any contiguous or padded slice.
    timestep: (B,) or per-token (B, L), or one row for every row ((1,), (1, L)): the time
    embedding and the modulation broadcast over the batch. context: (B, text_len, text_dim).
    rope: (cos, sin) tables (L, head_dim/2) for exactly these tokens' global positions.
    attention: self-attention callable (B, L, H, D)³ → (B, L, H, D); sequence-parallel backends
    pass one that exchanges keys and values across ranks.
    run_blocks: the block runner, `run_blocks(block, x, params["blocks"]) → x`, which applies
    `block(h, layer_params)` to the layers in order. How the layers' weights reach the block
    (resident, gathered from shards, exchanged between experts, compiled, skipped by a step
    cache) is the runner's business, so `params["blocks"]` is whatever the runner reads; the
    default, `ops.scan_layers`, walks resident per-layer params.
    Returns (B, L, pt·ph·pw·out_channels).
    """
    x = embed_patches(params, tokens, cfg, ops)
    temb, proj, ctx = condition(params, timestep, context, cfg, ops)

    def block(h, p):
        return transformer_block(p, h, ctx, proj, rope, cfg, ops, attention)

    x = (run_blocks or ops.scan_layers)(block, x, params["blocks"])
    return output_head(params, x, temb, cfg, ops)
