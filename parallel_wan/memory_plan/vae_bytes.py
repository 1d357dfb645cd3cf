"""The VAE decode's bytes on rank 0: the run's decode on meta tensors, split by height over the
job's ranks as the run splits it (`HeightBandOps` with null collectives)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VaeBytes:
    weights: int  # the VAE in fp32
    held: int  # the latents of every prompt (fp32), which the decoder reads
    peak: int  # what the decode's ops hold at once (rank 0: also the received bands)
    bands: int  # ranks the decode is split over


def vae_decode_bytes(vcfg, latent_shape, prompts: int, ranks: int) -> VaeBytes:
    """The VAE decode on rank 0: `models.vae.decode` (one latent frame per call, the causal
    time cache; the chunks after the cache's shapes settle are counted, not run:
    steady_decode.py) and the uint8 frames, run on meta tensors of the whole video; split over every
    rank of the job by latent rows (backends/torch/vae_decode.py; JAX: vae_codec.py) when the
    job has several, rank 0 holding the largest band and receiving the others' uint8 bands."""
    import math

    import torch

    from ..backends.torch import ops as torch_ops
    from ..backends.torch.collectives import NullCollectives
    from ..backends.torch.vae_bands import HeightBandOps, height_bands
    from ..measure.live_bytes import LiveBytes
    from ..models import vae
    from ..models.vae_shapes import param_shapes
    from ..report.frames import to_uint8_frames
    from ..weights.tree import unflatten
    from .meta_backend import FusedAttentionOps
    from .steady_decode import steady_decode

    shapes = param_shapes(vcfg)
    weights = sum(math.prod(shape) for shape in shapes.values()) * 4  # the VAE runs in fp32
    params = unflatten({n: torch.empty(shape, device="meta") for n, shape in shapes.items()})
    _, z, t, h, w = latent_shape
    latents = torch.empty((prompts, z, t, h, w), device="meta")
    bands = height_bands(h, ranks)
    band_ops = torch_ops
    if len(bands) > 1:  # rank 0's band, its halo rows and the keys/values of attention made, not sent
        band_ops = HeightBandOps([b - a for a, b in bands], 0, NullCollectives(0, len(bands)), base=FusedAttentionOps())
    start, stop = bands[0]
    with torch.inference_mode(), LiveBytes() as live:
        for row in range(prompts):
            zrow = vae.denormalize_latents(latents[row : row + 1, :, :, start:stop], vcfg, torch_ops)
            frames = to_uint8_frames(steady_decode(params, zrow, band_ops, vcfg, live), torch_ops).contiguous()
            if len(bands) > 1:  # rank 0 receives the other bands, then concatenates
                others = [
                    torch.empty(
                        (frames.shape[0], (b - a) * frames.shape[1] // (stop - start), *frames.shape[2:]),
                        dtype=frames.dtype,
                        device="meta",
                    )
                    for a, b in bands[1:]
                ]
                torch.cat([frames, *others], dim=1)  # the whole video, held until it goes to the host
                del others
            del zrow, frames
    return VaeBytes(weights, latents.numel() * 4, live.peak, len(bands))
