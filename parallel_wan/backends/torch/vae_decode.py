"""The Wan VAE decode split across every rank of the job by height, for the PyTorch backend:
each rank decodes a band of latent rows with HeightBandOps (vae_bands.py), and its activations
shrink in proportion to its band (benchmarks/vae_decode.py, 720p: 0.52 of one process's on 2
ranks, 0.27 on 4).

This is the same computation partitioned, not overlapping tiles: the float video equals the
one-device decode up to the kernels' rounding for a different tensor shape (fp32 on CPU:
relative error ≤ 1.3e-6, uint8 frames within 1 level on a few values;
tests/parallel/test_vae_decode_parallel.py). The split is the one the JAX backend gets from XLA's
SPMD partitioner (backends/jax/vae_codec.py), written out by hand.

Frames become uint8 on each rank; rank 0 receives the bands (uint8, ~1/4 the float bytes)
and returns whole videos; other ranks return []. Every message goes through the collectives
the decoder is handed (the backend's; the planner and benchmarks/vae_decode.py pass null ones).
"""

from __future__ import annotations

import numpy as np
import torch

from ...parallel.collectives import Collectives
from ..contract import VideoDecoder
from . import ops
from .vae_bands import BandGroups, HeightBandOps, height_bands


class EagerVideoDecoder(VideoDecoder):
    """`decode(latents)` → uint8 frames per video on rank 0, [] on the other ranks; every
    rank of the job must call it (each decodes a band)."""

    def __init__(self, backend, params, cfg):
        self.backend, self.params, self.cfg = backend, params, cfg
        self._group = BandGroups(backend.mesh.comm)

    def compile(self, latent_shape) -> dict:
        return {}

    def frames_and_tail(self, latents, tail: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(the uint8 videos as __call__ returns them, and every video's last `tail` decoded
        frames as floats (1, 3, tail, H, W) on every rank): Animate's next segment is
        conditioned on those floats (both references take them, not the uint8 frames)."""
        return self._decode(latents, tail)

    def __call__(self, latents) -> list[np.ndarray]:
        return self._decode(latents, None)[0]

    def _decode(self, latents, tail: int | None) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(uint8 videos on rank 0, [] elsewhere; with `tail`, each video's last `tail` decoded
        frames as floats on every rank, each band's broadcast by the rank that decoded it)."""
        from ...models import vae
        from ...report.frames import to_uint8_frames

        world, rank = self.backend.mesh.world_size, self.backend.rank
        videos, tails = [], []
        if world == 1:
            for row in range(latents.shape[0]):
                z = vae.denormalize_latents(latents[row : row + 1], self.cfg, ops)
                video = vae.decode(self.params, z, ops, self.cfg)
                videos.append(self.backend.to_host(to_uint8_frames(video, ops)).astype(np.uint8))
                if tail:
                    tails.append(self.backend.to_host(video[:, :, -tail:]).astype(np.float32))
            return videos, tails

        # Every rank holds every prompt's latents (pipeline.work.gather_latent_tokens); bands
        # are cut from rank 0's copy so the seams agree to the bit by construction (the CFG
        # halves of dp ranks agree anyway). One broadcast of the latents: 19 MB at 720p.
        latents = self.backend.broadcast_from_main(latents if rank == 0 else None)
        bands = height_bands(latents.shape[3], world)
        group = self._group(len(bands), world)
        comm = self.backend.mesh.comm
        band_ops = None
        if rank < len(bands):  # a rank past the bands decodes nothing (it still takes the tails)
            band_ops = HeightBandOps([b - a for a, b in bands], rank, comm, group)
        for row in range(latents.shape[0]):
            mine = None
            if band_ops is not None:
                start, stop = bands[rank]
                z = vae.denormalize_latents(latents[row : row + 1, :, :, start:stop], self.cfg, ops)
                video = vae.decode(self.params, z, band_ops, self.cfg)
                whole = _gather_rows_to_rank0(to_uint8_frames(video, ops).contiguous(), len(bands), rank, comm)
                if whole is not None:
                    videos.append(self.backend.to_host(whole).astype(np.uint8))
                mine = video[:, :, -tail:].to(torch.float32).contiguous() if tail else None
            if tail:
                tails.append(self._tail(mine, bands, tail, latents.shape[4]))
        return videos, tails

    def _tail(self, mine, bands, tail: int, latent_width: int) -> np.ndarray:
        """Every band's last `tail` float frames, broadcast by its owner, joined by rows."""
        comm, scale = self.backend.mesh.comm, self.cfg.scale_factor_spatial
        parts = []
        for owner, (a, b) in enumerate(bands):
            part = mine if owner == self.backend.rank else None
            if part is None:
                shape = (1, 3, tail, (b - a) * scale, latent_width * scale)
                part = torch.empty(shape, dtype=torch.float32, device=self.backend.device)
            comm.broadcast(part, src=owner)
            parts.append(part)
        return self.backend.to_host(torch.cat(parts, dim=3)).astype(np.float32)


def _gather_rows_to_rank0(frames: torch.Tensor, ranks: int, rank: int, comm: Collectives) -> torch.Tensor | None:
    """(T, rows, W, 3) uint8 bands of ranks 0 … ranks − 1 → the whole frames on rank 0 (None
    elsewhere). Each band's shape travels first, so rank 0 needs no model of the decoder."""
    if rank != 0:
        comm.send(torch.tensor(frames.shape, dtype=torch.int64, device=frames.device), 0)
        comm.send(frames, 0)
        return None
    bands = [frames]
    for peer in range(1, ranks):
        shape = torch.empty(frames.ndim, dtype=torch.int64, device=frames.device)
        comm.recv(shape, peer)
        band = torch.empty(tuple(shape.tolist()), dtype=frames.dtype, device=frames.device)
        comm.recv(band, peer)
        bands.append(band)
    return torch.cat(bands, dim=1)
