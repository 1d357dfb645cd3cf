"""The Wan VAE decoder for one latent frame: conv_in, middle block, up blocks, head. Param
names follow diffusers' WanDecoder3d."""

from __future__ import annotations

from .vae_blocks import mid_block, residual_block, rms_norm
from .vae_causal import Array, TimeCache, causal_conv3d
from .vae_config import VaeConfig
from .vae_resample import dup_up_3d, upsample


def decoder_chunk(p, x, ops, cfg: VaeConfig, cache: TimeCache) -> Array:
    """(B, z_dim, 1, h, w) after `post_quant_conv` → (B, out_channels, F, H, W) with F = 1 for
    the first latent frame of a video and 4 for each later one."""
    x = causal_conv3d(p["conv_in"], x, ops, cache, "decoder.conv_in")
    x = mid_block(p["mid_block"], x, ops, cache, "decoder.mid_block")
    levels = len(cfg.dim_mult)
    for i, block in enumerate(p["up_blocks"]):
        name = f"decoder.up_blocks.{i}"
        if cfg.is_residual:
            up = i != levels - 1
            temporal = up and bool(cfg.temperal_upsample[i])
            x = _residual_up_block(block, x, ops, cache, name, temporal, up)
        else:
            x = _up_block(block, x, ops, cache, name)
    x = ops.silu(rms_norm(x, p["norm_out"]["gamma"], ops))
    return causal_conv3d(p["conv_out"], x, ops, cache, "decoder.conv_out")


def _up_block(p, x, ops, cache: TimeCache, name: str) -> Array:
    """Wan 2.1: resnets, then an optional resample (upsamplers.0)."""
    for j, resnet in enumerate(p["resnets"]):
        x = residual_block(resnet, x, ops, cache, f"{name}.resnets.{j}")
    if "upsamplers" in p:
        x = upsample(p["upsamplers"][0], x, ops, cache, f"{name}.upsamplers.0")
    return x


def _residual_up_block(p, x, ops, cache: TimeCache, name: str, temporal: bool, up: bool) -> Array:
    """Wan 2.2: resnets then the resample, plus a parameter-free channel-to-space shortcut."""
    block_input = x
    for j, resnet in enumerate(p["resnets"]):
        x = residual_block(resnet, x, ops, cache, f"{name}.resnets.{j}")
    if not up:
        return x
    x = upsample(p["upsampler"], x, ops, cache, f"{name}.upsampler")
    out_channels = p["resnets"][-1]["conv2"]["weight"].shape[0]
    return x + dup_up_3d(block_input, out_channels, 2 if temporal else 1, 2, cache.first_chunk, ops)
