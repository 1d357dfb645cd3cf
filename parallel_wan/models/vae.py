"""Wan VAE (2.1 and 2.2), the public calls: encode / decode whole videos, one chunk at a time,
and the per-channel latent (de)normalisation the pipelines apply around the transformer.

`params` is `weights.tree.unflatten(diffusers_state_dict)` of an AutoencoderKLWan; `cfg` its
VaeConfig. Results equal diffusers' AutoencoderKLWan (no tiling): `decode(z)` is
`.decode(z).sample`, `encode(x)` is `.encode(x).latent_dist.mode()`.

The chunk calls carry the causal time cache as a value (see vae_causal.py): pass None for the
first chunk of a video, then what the previous call returned. After the first chunk the cache
keeps one structure and shape, so a backend may run the rest as a scan.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .vae_causal import Array, TimeCache, causal_conv3d
from .vae_config import VaeConfig
from .vae_decoder import decoder_chunk
from .vae_encoder import encoder_chunk
from .vae_resample import patchify, unpatchify

Cache = Mapping[str, Array]


# ---------------------------------------------------------------------------- decode
def decode_chunk(params, z, cache: Cache | None, ops, cfg: VaeConfig) -> tuple[Array, dict]:
    """De-normalised latent frames (B, z_dim, t, h, w) → (video frames in [-1, 1], cache).

    The first chunk of a video (cache None) must be one latent frame and gives one video frame;
    later chunks give `temporal_stride` frames per latent frame. The reference decodes one
    latent frame per call; several per later call give the same numbers (every op is causal
    in time or per frame) with more memory.
    """
    _check_latents(z, cfg)
    if cache is None and z.shape[2] != 1:
        raise ValueError(
            f"the first VAE decode chunk of a video must be 1 latent frame, got {z.shape[2]}; "
            "decode frame 0 alone (it maps to one video frame), then the rest"
        )
    tc = TimeCache(cache)
    x = causal_conv3d(params["post_quant_conv"], z, ops, tc, "post_quant_conv")
    x = decoder_chunk(params["decoder"], x, ops, cfg, tc)
    x = unpatchify(x, cfg.patch_size, ops)
    return ops.clip(x, -1.0, 1.0), tc.next


def decode(params, z, ops, cfg: VaeConfig) -> Array:
    """(B, z_dim, T, h, w) de-normalised latents → (B, 3, 1 + 4(T-1), H, W) in [-1, 1],
    one latent frame per decoder call, so memory is bounded by one chunk."""
    _check_latents(z, cfg)
    cache = None
    frames = []
    for i in range(z.shape[2]):
        out, cache = decode_chunk(params, z[:, :, i : i + 1], cache, ops, cfg)
        frames.append(out)
    return ops.concat(frames, axis=2)


# ---------------------------------------------------------------------------- encode
def encode_chunk(params, video, cache: Cache | None, ops, cfg: VaeConfig) -> tuple[Array, dict]:
    """Video frames (B, 3, t, H, W) in [-1, 1] → (posterior mean (B, z_dim, t', h, w), cache).

    The first chunk of a video (cache None) must be one frame; later chunks a multiple of
    `temporal_stride` frames (the reference feeds exactly 4).
    """
    _check_video(video, cfg)
    t, stride = video.shape[2], cfg.temporal_stride
    if cache is None and t != 1:
        raise ValueError(
            f"the first VAE encode chunk of a video must be 1 frame, got {t}; encode frame 0 "
            f"alone, then {stride} frames at a time"
        )
    if cache is not None and t % stride:
        raise ValueError(f"a later VAE encode chunk must hold a multiple of {stride} frames, got {t}")
    tc = TimeCache(cache)
    x = patchify(video, cfg.patch_size, ops)
    x = encoder_chunk(params["encoder"], x, ops, cfg, tc)
    moments = causal_conv3d(params["quant_conv"], x, ops, tc, "quant_conv")
    # moments = [mean, log variance]; the mode of the diagonal Gaussian is its mean.
    return moments[:, : cfg.z_dim], tc.next


def encode(params, video, ops, cfg: VaeConfig) -> Array:
    """(B, 3, 1 + 4k, H, W) in [-1, 1] → posterior mean (B, z_dim, 1 + k, H/s, W/s), encoding
    the first frame, then 4 frames at a time, as the reference does."""
    _check_video(video, cfg)
    t, stride = video.shape[2], cfg.temporal_stride
    if (t - 1) % stride:
        fewer = 1 + (t - 1) // stride * stride
        raise ValueError(
            f"VAE encode needs 1 + {stride}·k frames, got {t}; trim the video to {fewer} frames "
            f"or pad it to {fewer + stride}"
        )
    mean, cache = encode_chunk(params, video[:, :, :1], None, ops, cfg)
    means = [mean]
    for start in range(1, t, stride):
        mean, cache = encode_chunk(params, video[:, :, start : start + stride], cache, ops, cfg)
        means.append(mean)
    return ops.concat(means, axis=2)


# ---------------------------------------------------------------------------- latent scale
def normalize_latents(z, cfg: VaeConfig, ops) -> Array:
    """(z - mean) / std per channel: the scale the transformer works in. Written as the
    pipelines write it, (z - mean) · (1 / std), so the rounding matches theirs."""
    mean, inv_std = _latent_stats(z, cfg, ops)
    return (z - mean) * inv_std


def denormalize_latents(z, cfg: VaeConfig, ops) -> Array:
    """z · std + mean per channel, written as the pipelines write it: z / (1 / std) + mean."""
    mean, inv_std = _latent_stats(z, cfg, ops)
    return z / inv_std + mean


def _latent_stats(z, cfg: VaeConfig, ops) -> tuple[Array, Array]:
    _check_latents(z, cfg)
    shape = (1, cfg.z_dim, 1, 1, 1)
    # The pipelines build float32 tensors from the config lists and take 1/std in float32,
    # then cast to the latents' dtype.
    mean = np.asarray(cfg.latents_mean, dtype=np.float32).reshape(shape)
    inv_std = (np.float32(1.0) / np.asarray(cfg.latents_std, dtype=np.float32)).reshape(shape)
    dtype = ops.dtype_name(z)
    return ops.asarray(mean, dtype, like=z), ops.asarray(inv_std, dtype, like=z)


# ---------------------------------------------------------------------------- checks
def _check_latents(z, cfg: VaeConfig) -> None:
    if z.ndim != 5 or z.shape[1] != cfg.z_dim:
        raise ValueError(
            f"VAE latents must be (batch, z_dim={cfg.z_dim}, frames, height, width), got shape "
            f"{tuple(z.shape)}; check that the VAE matches the transformer (Wan 2.1 VAE: z 16, "
            "Wan 2.2 VAE: z 48)"
        )


def _check_video(video, cfg: VaeConfig) -> None:
    pixel_channels = cfg.in_channels // cfg.patch_factor
    if video.ndim != 5 or video.shape[1] != pixel_channels:
        raise ValueError(
            f"VAE input video must be (batch, {pixel_channels}, frames, height, width), got shape {tuple(video.shape)}"
        )
    s = cfg.spatial_stride
    if video.shape[3] % s or video.shape[4] % s:
        raise ValueError(
            f"VAE input height and width must be multiples of {s}, got {video.shape[3]}×{video.shape[4]}; "
            f"resize or crop the video to a multiple of {s}"
        )
