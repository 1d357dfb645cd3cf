"""The Wan VAE encoder for one chunk of (patchified) frames: conv_in, down blocks, middle
block, head. Param names follow diffusers' WanEncoder3d."""

from __future__ import annotations

from .vae_blocks import mid_block, residual_block, rms_norm
from .vae_causal import Array, TimeCache, causal_conv3d
from .vae_config import VaeConfig
from .vae_resample import avg_down_3d, downsample


def encoder_chunk(p, x, ops, cfg: VaeConfig, cache: TimeCache) -> Array:
    """(B, in_channels, T, H, W) → (B, 2·z_dim, T', H', W'): the posterior moments before
    `quant_conv`, H' = H / 2^(levels-1). T' = 1 for the first chunk (1 frame), T / 4 after."""
    x = causal_conv3d(p["conv_in"], x, ops, cache, "encoder.conv_in")
    blocks = p["down_blocks"]
    if cfg.is_residual:
        levels = len(cfg.dim_mult)
        for i, block in enumerate(blocks):
            down = i != levels - 1
            temporal = down and bool(cfg.temperal_downsample[i])
            x = _residual_down_block(block, x, ops, cache, f"encoder.down_blocks.{i}", temporal, down)
    else:
        # Wan 2.1 keeps the blocks as one flat list of resnets and resamples.
        for i, block in enumerate(blocks):
            name = f"encoder.down_blocks.{i}"
            if "norm1" in block:
                x = residual_block(block, x, ops, cache, name)
            else:
                x = downsample(block, x, ops, cache, name)
    x = mid_block(p["mid_block"], x, ops, cache, "encoder.mid_block")
    x = ops.silu(rms_norm(x, p["norm_out"]["gamma"], ops))
    return causal_conv3d(p["conv_out"], x, ops, cache, "encoder.conv_out")


def _residual_down_block(p, x, ops, cache: TimeCache, name: str, temporal: bool, down: bool) -> Array:
    """Wan 2.2: resnets then the resample, plus a parameter-free average-pool shortcut."""
    out_channels = p["resnets"][-1]["conv2"]["weight"].shape[0]
    shortcut = avg_down_3d(x, out_channels, 2 if temporal else 1, 2 if down else 1, ops)
    for j, resnet in enumerate(p["resnets"]):
        x = residual_block(resnet, x, ops, cache, f"{name}.resnets.{j}")
    if down:
        x = downsample(p["downsampler"], x, ops, cache, f"{name}.downsampler")
    return x + shortcut
