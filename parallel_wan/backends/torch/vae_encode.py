"""The Wan VAE encode split across every rank of the job by height, for the PyTorch backend:
what a video-to-video run's source and an I2V run's [image, black frames…] go through, the
same whole video on every rank. Each rank encodes a band of rows (whole latent rows: a multiple
of the VAE's spatial stride, so every level's band has an even count for the stride-2
downsampling) with HeightBandOps (vae_bands.py), and one all-gather gives every rank the whole
posterior mean — the bands padded to the largest, as NCCL's all_gather needs equal shapes.

The same computation partitioned: equal to the one-device encode up to the kernels' rounding
for other tensor shapes (tests/parallel/test_vae_encode_parallel.py), and each rank's time and
activations shrink in proportion to its band — where every rank used to encode the whole video.
"""

from __future__ import annotations

import numpy as np
import torch

from . import ops
from .vae_bands import BandGroups, HeightBandOps, height_bands


class HeightSplitEncoder:
    """`encode(params, video, cfg)` → the posterior mean (1, z_dim, 1 + k, h, w) on every rank;
    every rank of the job calls it with the same video."""

    def __init__(self, backend):
        self.backend = backend
        self._group = BandGroups(backend.mesh.comm)

    def __call__(self, params, video: np.ndarray, cfg) -> torch.Tensor:
        from ...models import vae

        backend, world, rank = self.backend, self.backend.mesh.world_size, self.backend.rank
        stride = cfg.spatial_stride  # pixel rows per latent row
        rows = video.shape[3] // stride
        if world == 1 or rows < 2:
            return vae.encode(params, backend.to_device(video), ops, cfg)
        bands = height_bands(rows, world)
        group = self._group(len(bands), world)
        widest = max(b - a for a, b in bands)
        shape = (video.shape[0], cfg.z_dim, 1 + (video.shape[2] - 1) // cfg.temporal_stride, widest)
        shape += (video.shape[4] // stride,)
        if rank < len(bands):
            a, b = bands[rank]
            band_ops = HeightBandOps([stop - start for start, stop in bands], rank, backend.mesh.comm, group)
            band = backend.to_device(np.ascontiguousarray(video[:, :, :, a * stride : b * stride]))
            z = vae.encode(params, band, band_ops, cfg)
            z = torch.nn.functional.pad(z, (0, 0, 0, widest - z.shape[3])).contiguous()
        else:  # more ranks than latent rows: this one encodes nothing and receives the whole
            dtype = params["quant_conv"]["weight"].dtype  # the encoder's output dtype
            z = torch.zeros(shape, dtype=dtype, device=backend.device)
        parts = [torch.empty_like(z) for _ in range(world)]
        backend.mesh.comm.all_gather(parts, z)
        return torch.cat([parts[i][:, :, :, : b - a] for i, (a, b) in enumerate(bands)], dim=3)
