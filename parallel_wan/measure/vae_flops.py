"""Analytic FLOP count of the VAE decode (`models.vae.decode`), from the decoder's parameter
table (models/vae_shapes.py) and where each layer runs — the same convention as flops.py: 2
FLOPs per multiply-add of every convolution and of the middle block's attention; norms,
activations, padding and upsampling copies are not counted (a few % at most).

Where a layer runs: the decoder starts at the latent size (T frames of h × w) and each level
but the last doubles height and width after its resnets; a level with temporal upsampling
first doubles the frames of every chunk but the video's first (1 + 4(T − 1) frames at the end):
its time conv runs on all frames but that first one.
The Wan 2.2 VAE's decoder ends at half the video's size (a 2×2 unpatchify follows). A time
conv runs at its level's size before the frames double; a resample's 3×3 conv after both.
tests/unit/test_job_time.py holds this to torch's FlopCounterMode on the real decode.
"""

from __future__ import annotations

import math
import re

from ..models.vae_config import VaeConfig
from ..models.vae_shapes import param_shapes

_LEVEL = re.compile(r"^decoder\.up_blocks\.(\d+)\.")


def decode_flops(cfg: VaeConfig, latent_frames: int, latent_height: int, latent_width: int, videos: int = 1) -> int:
    """FLOPs of decoding `videos` latents of (latent_frames, latent_height, latent_width)."""
    levels = len(cfg.dim_mult)
    frames = [latent_frames]  # frames entering each level
    for i in range(levels - 1):
        temporal = bool(cfg.temperal_upsample[i])
        frames.append(1 + 2 * (frames[-1] - 1) if temporal else frames[-1])
    pixels = [latent_height * latent_width * 4**i for i in range(levels)]  # per frame, entering each level
    total = 0
    for name, shape in param_shapes(cfg).items():
        if not name.startswith(("decoder.", "post_quant_conv.")) or not name.endswith(".weight") or len(shape) < 3:
            continue
        macs = math.prod(shape)  # out × in × kernel: multiply-adds per output position
        level = _LEVEL.match(name)
        if name.startswith(("post_quant_conv.", "decoder.conv_in.", "decoder.mid_block.")):
            where = (frames[0], pixels[0])
        elif name.startswith(("decoder.conv_out.", "decoder.norm_out.")):
            where = (frames[-1], pixels[-1])
        elif level and (".upsampler" in name) and ".resample." in name:
            i = int(level.group(1))
            where = (frames[i + 1], pixels[i + 1])
        elif level and ".time_conv." in name:  # every chunk's frames but the video's first (kept, not doubled)
            i = int(level.group(1))
            where = (frames[i] - 1, pixels[i])
        else:  # a level's resnets
            i = int(level.group(1))
            where = (frames[i], pixels[i])
        total += 2 * macs * where[0] * where[1]
    # the middle block's single-head attention over each frame's positions: QKᵀ and PV
    dim = cfg.decoder_dim * cfg.dim_mult[-1]
    total += 2 * 2 * pixels[0] ** 2 * dim * frames[0]
    return total * videos
