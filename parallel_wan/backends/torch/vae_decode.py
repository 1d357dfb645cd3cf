"""The Wan VAE decode split across every rank of the job by height, for the PyTorch backend.

Each rank holds a contiguous band of latent rows and runs the unchanged model code
(`models.vae.decode`) with `HeightBandOps`: the torch ops namespace, except that

- a convolution padded along the height first swaps halo rows with the neighbouring ranks
  (zeros at the true top and bottom of the frame, which is the convolution's own zero
  padding), so every output row sees exactly the inputs it sees in a one-device decode;
- attention (the middle block's per-frame spatial attention, at latent resolution: its tokens
  are the band's pixels, rows outermost) keeps the band's queries and gathers every rank's
  keys and values.

Nothing else in the decoder mixes rows: norms and activations are per pixel, the causal time
cache is per pixel (so each band keeps its own), and every resolution change maps row r to
rows s·r … s·r + s − 1 (nearest upsampling, Wan 2.2's DupUp3D shortcut and 2×2 unpatchify),
which keeps bands contiguous and in rank order at every level. No row is computed twice, and
each rank's activations shrink in proportion to its band (benchmarks/vae_decode.py, 720p:
0.52 of one process's on 2 ranks, 0.27 on 4).

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


def height_bands(height: int, ranks: int) -> list[tuple[int, int]]:
    """[start, stop) latent rows per rank, as even as possible, larger bands first (90 rows on
    8 ranks → 12, 12, 11, …). With more ranks than rows only the first `height` ranks get a
    row; the list holds the ranks that take part."""
    n = min(height, ranks)
    sizes = [height // n + (1 if i < height % n else 0) for i in range(n)]
    starts = np.cumsum([0, *sizes])
    return [(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:])]


class HeightBandOps:
    """`ops` for one rank's band of rows, in a decode split over `len(band_rows)` ranks
    (global ranks 0 … n − 1, in row order), exchanging rows through `comm`. Everything not defined here is the torch ops
    module's; ops the decoder does not use and that would need another rank's rows
    (height padding, a height stride) are refused rather than computed wrong."""

    def __init__(self, band_rows: list[int], index: int, comm: Collectives, group=None, base=ops):
        # base: the ops everything else runs on (the planner's keep only a fused kernel's
        # attention outputs on meta tensors)
        self.band_rows, self.index, self.comm, self.group, self.base = list(band_rows), index, comm, group, base
        self.above = index - 1 if index > 0 else None
        self.below = index + 1 if index + 1 < len(band_rows) else None

    def __getattr__(self, name):
        return getattr(self.base, name)

    # ------------------------------------------------------------ convolutions
    def conv3d(self, x, w, b=None, stride=(1, 1, 1), padding=(0, 0, 0)):
        x, padding = self._height_halo(x, w, stride, padding)
        return self.base.conv3d(x, w, b, stride=stride, padding=padding)

    def conv2d(self, x, w, b=None, stride=(1, 1), padding=(0, 0)):
        x, padding = self._height_halo(x, w, stride, padding)
        return self.base.conv2d(x, w, b, stride=stride, padding=padding)

    def _height_halo(self, x, w, stride, padding):
        """`x` with the neighbours' rows (or zeros at the frame's edge) above and below, and
        the padding with the height entry moved into those rows."""
        axis = x.ndim - 2  # height: (N, C, [T,] H, W)
        rows, kernel = padding[-2], w.shape[-2]
        if kernel > 1 and (stride[-2] != 1 or kernel != 2 * rows + 1):
            raise NotImplementedError(
                f"a height-split VAE decode supports stride-1 'same' convolutions along the height; "
                f"got kernel {kernel}, stride {stride[-2]}, padding {rows}"
            )
        if rows == 0:
            return x, padding
        if x.shape[axis] < rows:
            raise ValueError(
                f"rank {self.index}'s band has {x.shape[axis]} rows, fewer than the {rows}-row halo a "
                "convolution needs; decode on fewer ranks (the latent height sets the most)"
            )
        first = x.narrow(axis, 0, rows).contiguous()
        last = x.narrow(axis, x.shape[axis] - rows, rows).contiguous()
        from_above, from_below = torch.zeros_like(first), torch.zeros_like(last)
        sends, recvs = [], []
        if self.above is not None:
            sends.append((first, self.above))
            recvs.append((from_above, self.above))
        if self.below is not None:
            sends.append((last, self.below))
            recvs.append((from_below, self.below))
        for request in self.comm.exchange(sends, recvs):
            request.wait()
        padding = (*padding[:-2], 0, padding[-1])
        return torch.cat([from_above, x, from_below], dim=axis), padding

    def pad(self, x, widths, value: float = 0.0):
        if x.ndim in (4, 5) and any(widths[x.ndim - 2]):
            raise NotImplementedError(
                "a height-split VAE decode cannot pad along the height (that needs the neighbours' "
                "rows); only the encoder does, and it runs on one device"
            )
        return self.base.pad(x, widths, value)

    # ------------------------------------------------------------ attention
    def attention(self, q, k, v, scale: float | None = None):
        """Full attention over the whole frame for this band's queries. Tokens (axis 1) are
        pixels with rows outermost, so rank r holds tokens_here · rows_r / rows_here of them,
        contiguous and in rank order."""
        here = self.band_rows[self.index]
        if q.shape[1] % here:
            raise ValueError(f"attention over {q.shape[1]} tokens is not whole rows of a {here}-row band")
        per_row = q.shape[1] // here
        counts = [rows * per_row for rows in self.band_rows]
        kv = torch.cat([k, v], dim=-1)
        padded = torch.nn.functional.pad(kv, (0, 0, 0, 0, 0, max(counts) - kv.shape[1])).contiguous()
        parts = [torch.empty_like(padded) for _ in counts]
        self.comm.all_gather(parts, padded, self.group)
        kv = torch.cat([part[:, :count] for part, count in zip(parts, counts)], dim=1)
        k, v = kv.split(k.shape[-1], dim=-1)
        return self.base.attention(q, k, v, scale)


class EagerVideoDecoder(VideoDecoder):
    """`decode(latents)` → uint8 frames per video on rank 0, [] on the other ranks; every
    rank of the job must call it (each decodes a band)."""

    def __init__(self, backend, params, cfg):
        self.backend, self.params, self.cfg = backend, params, cfg
        self._groups: dict[int, object] = {}

    def compile(self, latent_shape) -> dict:
        return {}

    def __call__(self, latents) -> list[np.ndarray]:
        from ...models import vae
        from ...report.frames import to_uint8_frames

        world, rank = self.backend.mesh.world_size, self.backend.rank
        if world == 1:
            videos = []
            for row in range(latents.shape[0]):
                z = vae.denormalize_latents(latents[row : row + 1], self.cfg, ops)
                video = vae.decode(self.params, z, ops, self.cfg)
                videos.append(self.backend.to_host(to_uint8_frames(video, ops)).astype(np.uint8))
            return videos

        # Every rank holds every prompt's latents (pipeline.work.gather_latent_tokens); bands
        # are cut from rank 0's copy so the seams agree to the bit by construction (the CFG
        # halves of dp ranks agree anyway). One broadcast of the latents: 19 MB at 720p.
        latents = self.backend.broadcast_from_main(latents if rank == 0 else None)
        bands = height_bands(latents.shape[3], world)
        group = self._group(len(bands), world)
        if rank >= len(bands):
            return []
        start, stop = bands[rank]
        comm = self.backend.mesh.comm
        band_ops = HeightBandOps([b - a for a, b in bands], rank, comm, group)
        videos = []
        for row in range(latents.shape[0]):
            z = vae.denormalize_latents(latents[row : row + 1, :, :, start:stop], self.cfg, ops)
            frames = to_uint8_frames(vae.decode(self.params, z, band_ops, self.cfg), ops).contiguous()
            whole = _gather_rows_to_rank0(frames, len(bands), rank, comm)
            if whole is not None:
                videos.append(self.backend.to_host(whole).astype(np.uint8))
        return videos

    def _group(self, ranks: int, world: int):
        """The process group of the ranks that decode (all call new_group, in the same order)."""
        if ranks == world:
            return None
        if ranks not in self._groups:
            self._groups[ranks] = self.backend.mesh.comm.new_group(list(range(ranks)))
        return self._groups[ranks]


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
