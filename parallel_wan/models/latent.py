"""The video ↔ latent arithmetic, written once: the latent a video of F frames × H × W gives, the
frame counts the VAE accepts, and the sizes the VAE and the patch divide. Everything follows from
the VAE's strides (temporal 4: the first frame alone, then 4 frames per latent frame; spatial 8
or 16) and the transformer's patch. Plain arithmetic (no torch, no jax)."""

from __future__ import annotations

import math


def latent_frames(num_frames: int, vae) -> int:
    """Latent frames of a video of `num_frames` (= 1 + stride·k) frames."""
    return (num_frames - 1) // vae.scale_factor_temporal + 1


def video_frames(frames: int, vae) -> int:
    """Video frames a latent of `frames` latent frames decodes to (the inverse of latent_frames)."""
    return (frames - 1) * vae.scale_factor_temporal + 1


def latent_shape(
    num_frames: int, height: int, width: int, channels: int, vae, reference_frames: int = 0
) -> tuple[int, int, int, int, int]:
    """(1, channels, latent frames, latent height, latent width) of one video; with
    `reference_frames` latent frames before the video's that are denoised with it (Animate's
    reference frame: models/variants.py `Variant.reference_frames`)."""
    stride = vae.scale_factor_spatial
    frames = reference_frames + latent_frames(num_frames, vae)
    return (1, channels, frames, height // stride, width // stride)


def decoded_shape(transformer, latent_shape, reference_frames: int = 0) -> tuple:
    """The latents a video's (or a clip's) decode reads, from its denoised ones: without the
    `reference_frames` denoised before the video's (Animate's character frame is not decoded);
    S2V's after the motion frames' latents (pipeline/s2v.py decodes them first)."""
    b, c, t, h, w = latent_shape
    motion = transformer.s2v.motion_latent_frames if transformer.s2v is not None else 0
    return (b, c, t - reference_frames + motion, h, w)


def frames_fit(num_frames: int, vae) -> bool:
    """The VAE encodes and decodes 1 + stride·k frames (4k+1 for every Wan VAE)."""
    return num_frames >= 1 and num_frames % vae.scale_factor_temporal == 1 % vae.scale_factor_temporal


def frames_at_most(num_frames: int, vae) -> int:
    """The largest accepted frame count not above `num_frames` (at least 1)."""
    stride = vae.scale_factor_temporal
    return max(1, stride * ((num_frames - 1) // stride) + 1)


def nearest_frames(num_frames: int, vae) -> int:
    """The accepted frame count nearest to `num_frames`."""
    stride = vae.scale_factor_temporal
    return max(1, stride * round((num_frames - 1) / stride) + 1)


def size_multiple(transformer, vae) -> int:
    """What height and width must be multiples of: one patch of latent pixels, in video pixels
    (the VAE's spatial stride × the patch: 16 for the Wan 2.1 VAE, 32 for Wan 2.2's; S2V's 64:
    its frame packer embeds the farthest motion frames by 8 × 8 latent pixels)."""
    _, ph, pw = transformer.patch_size
    packed = 4 if transformer.s2v is not None else 1
    return vae.scale_factor_spatial * math.lcm(ph, pw) * packed
