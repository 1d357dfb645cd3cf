"""Height bands: the Wan VAE split across the ranks of a job by rows, for the PyTorch backend —
the decode (vae_decode.py) and the encode (vae_encode.py).

Each rank holds a contiguous band of rows and runs the unchanged model code (`models.vae`) with
`HeightBandOps`: the torch ops namespace, except that

- a convolution padded along the height first swaps halo rows with the neighbouring ranks
  (zeros at the true top and bottom of the frame, which is the convolution's own zero
  padding), so every output row sees exactly the inputs it sees on one device;
- a padding along the height (the encoder's downsampling pads one row at the bottom before
  its stride-2 convolution) takes that row from the band below, and the unpadded convolution
  after it then runs on the band: bands hold an even number of rows at every level;
- attention (the middle block's per-frame spatial attention, at latent resolution: its tokens
  are the band's pixels, rows outermost) keeps the band's queries and gathers every rank's
  keys and values.

Nothing else in the VAE mixes rows: norms and activations are per pixel, the causal time cache
is per pixel (so each band keeps its own), and every resolution change maps rows to rows in
order (nearest upsampling, Wan 2.2's DupUp3D / AvgDown3D shortcuts and 2×2 (un)patchify), which
keeps bands contiguous and in rank order at every level. No row is computed twice.
"""

from __future__ import annotations

import numpy as np
import torch

from ...parallel.collectives import Collectives
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
    """`ops` for one rank's band of rows, in a VAE split over `len(band_rows)` ranks (global ranks
    0 … n − 1, in row order), exchanging rows through `comm`. Everything not defined here is the
    torch ops module's; what the VAE never does along the height and would need other rows for
    (a padded strided convolution, a non-zero pad) is refused rather than computed wrong."""

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
        the padding with the height entry moved into those rows. A convolution without height
        padding runs on the band as it is: the encoder's stride-2 downsampling, whose one row
        from below pad() has already fetched (bands hold an even number of rows at every level)."""
        rows, kernel = padding[-2], w.shape[-2]
        if rows == 0:
            return x, padding
        if kernel > 1 and (stride[-2] != 1 or kernel != 2 * rows + 1):
            raise NotImplementedError(
                f"a height-split VAE supports stride-1 'same' convolutions along the height, and unpadded "
                f"ones after pad(); got kernel {kernel}, stride {stride[-2]}, padding {rows}"
            )
        x = self._with_neighbour_rows(x, x.ndim - 2, rows, rows)
        return x, (*padding[:-2], 0, padding[-1])

    def _with_neighbour_rows(self, x, axis: int, above: int, below: int):
        """`x` with the last `above` rows of the band above and the first `below` rows of the
        band below around it — zeros at the frame's top and bottom, which is the convolution's
        own zero padding."""
        if x.shape[axis] < max(above, below):
            raise ValueError(
                f"rank {self.index}'s band has {x.shape[axis]} rows, fewer than the {max(above, below)}-row halo a "
                "convolution needs; run the VAE on fewer ranks (the latent height sets the most)"
            )
        # every rank pads alike: the band above takes my first `below` rows, the band below my
        # last `above` rows
        first = x.narrow(axis, 0, below).contiguous()
        last = x.narrow(axis, x.shape[axis] - above, above).contiguous()
        from_above, from_below = torch.zeros_like(last), torch.zeros_like(first)
        sends, recvs = [], []
        if self.above is not None:
            if above:
                recvs.append((from_above, self.above))
            if below:
                sends.append((first, self.above))
        if self.below is not None:
            if above:
                sends.append((last, self.below))
            if below:
                recvs.append((from_below, self.below))
        for request in self.comm.exchange(sends, recvs):
            request.wait()
        return torch.cat([from_above, x, from_below], dim=axis)

    def pad(self, x, widths, value: float = 0.0):
        """Padding along the height takes the neighbours' rows (zeros at the frame's edges): the
        encoder's downsampling pads the bottom by one row before its stride-2 convolution."""
        axis = x.ndim - 2
        if x.ndim in (4, 5) and any(widths[axis]):
            if value != 0.0:
                raise NotImplementedError("a height-split VAE pads along the height with zeros only")
            x = self._with_neighbour_rows(x, axis, *widths[axis])
            widths = [*widths[:axis], (0, 0), *widths[axis + 1 :]]
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


class BandGroups:
    """The process group of the ranks that take part in a split VAE (the first `ranks` of the
    job; None when all do), made once per count. Every rank of the job asks, in the same order:
    new_group is collective."""

    def __init__(self, comm):
        self.comm = comm
        self._groups: dict[int, object] = {}

    def __call__(self, ranks: int, world: int):
        if ranks == world:
            return None
        if ranks not in self._groups:
            self._groups[ranks] = self.comm.new_group(list(range(ranks)))
        return self._groups[ranks]
