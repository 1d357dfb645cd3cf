"""sparse=svg's self-attention: Sparse-VideoGen's online profiling and head placement around
the block-sparse kernel sparse=radial runs (sparse_attention.py).

Per call (one block of one sparse step) and per (sequence, head):
1. profile: SAMPLES queries spread over the video attend densely, and under the band mask in
   each of the two orders (parallel/svg_mask.py: frame-major = spatial, token-major =
   temporal); the order whose output is nearer the dense one (mean squared error, as theirs)
   is the head's;
2. place: the temporal heads' q, k, v are gathered into token-major order (one gather each,
   every head at once: a spatial head's index is the identity);
3. the block-sparse kernel runs the one band mask over every head;
4. the output and its lse are gathered back into the sequence's order.
What differs from theirs, and why: their queries are drawn at random (torch.randint) from the
first 10,000 positions each call; ours are SAMPLES positions evenly spread over the whole video,
the same every call — so a run is reproducible, and every mesh (Ulysses: other heads; dp: other
rows) makes the one-device choices. Their profile measures fixed two-frame masks; ours the band
the kernel then runs. The profile costs ~SAMPLES / (density · tokens) of the layer's attention
(64 queries of 75,600 at 720p: 0.3 % of it at density 0.3), not counted in flops_skipped.

Needs each head's whole sequence in one call: one device, Ulysses (after its all-to-all), dp —
config/sparse.py refuses a ring.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...parallel.block_visits import BlockMask
from ...parallel.svg_mask import PROFILE_BYTES, SAMPLES, token_major_order
from .sparse_attention import SparseAttention, _upload


@dataclass(frozen=True)
class _Tables:
    order: torch.Tensor  # (L,) int64: temporal position m holds token order[m]
    inverse: torch.Tensor  # (L,): token n sits at temporal position inverse[n]
    identity: torch.Tensor  # (L,)
    samples: torch.Tensor  # (n,) the profiled queries' positions (sequence order)
    spatial: torch.Tensor  # (n, N) bool: keys each sample sees in frame-major order
    temporal: torch.Tensor  # (n, N) bool: … in token-major order (the key and the query reordered)


class SpatioTemporalAttention(SparseAttention):
    def __init__(self, mask: BlockMask, grid: tuple[int, int, int], dense_layers: int = 0):
        super().__init__(mask, dense_layers)
        frames, height, width = grid
        if frames * height * width != mask.tokens:
            raise ValueError(
                f"sparse=svg: the grid {grid} holds {frames * height * width} tokens, the mask {mask.tokens}"
            )
        self.frames, self.frame_tokens = frames, height * width
        self.heads_profiled = 0
        self._temporal = None  # the temporal choices so far, on the device (no sync per layer)
        self._tables: dict[tuple, _Tables] = {}

    def __call__(self, q, k, v, q_start: int, k_start: int, valid_keys: int, scale: float | None = None):
        length = q.shape[1]
        if q_start or k_start or k.shape[1] != length or valid_keys != self.mask.tokens:
            raise ValueError(
                f"sparse=svg reorders whole sequences but was handed queries from {q_start} and keys from {k_start} "
                f"({valid_keys} of {self.mask.tokens} valid): a ring's slices (config/sparse.py refuses a ring)"
            )
        scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
        tables = self._tables_for(length, q.device)
        temporal = self.choose(q, k, v, tables, scale)  # (B, H) bool
        self._tally(temporal)
        where = temporal[:, None, :]
        forward = torch.where(where, tables.order[None, :, None], tables.identity[None, :, None])  # (B, L, H)
        q, k, v = (_gather(t, forward) for t in (q, k, v))
        out, lse = super().__call__(q, k, v, 0, 0, valid_keys, scale)
        back = torch.where(where, tables.inverse[None, :, None], tables.identity[None, :, None])
        return _gather(out, back), torch.gather(lse, 1, back)

    def choose(self, q, k, v, tables: _Tables, scale: float) -> torch.Tensor:
        """(B, H) bool: which heads are temporal — the order whose masked output of the sampled
        queries is nearer their dense output. Both products in q's dtype (tensor cores on a GPU,
        as theirs: a float32 GEMM there runs without them), softmax and errors in float32; heads
        in chunks of PROFILE_BYTES of scores."""
        n, valid = tables.samples.numel(), self.mask.tokens
        b, _, heads, _ = q.shape
        chunk = max(1, PROFILE_BYTES // (4 * b * n * valid * 3))
        choices = []
        for h0 in range(0, heads, chunk):
            h1 = min(heads, h0 + chunk)
            qs = q[:, tables.samples, h0:h1]  # (B, n, h, D)
            ks, vs = k[:, :valid, h0:h1], v[:, :valid, h0:h1]
            scores = torch.einsum("bshd,blhd->bhsl", qs, ks).float() * scale
            dense = _attend(scores, None, vs)
            errors = [
                ((_attend(scores, mask, vs) - dense) ** 2).mean((2, 3)) for mask in (tables.spatial, tables.temporal)
            ]
            choices.append(errors[1] < errors[0])  # a tie stays spatial
        return torch.cat(choices, 1)

    def _tally(self, temporal: torch.Tensor) -> None:
        count = temporal.sum()
        self._temporal = count if self._temporal is None else self._temporal + count
        self.heads_profiled += temporal.numel()

    def layout_counts(self) -> torch.Tensor:
        """[temporal choices, choices made] over this rank's sparse calls (int64, on the device)."""
        if self._temporal is None:
            return torch.zeros(2, dtype=torch.int64)
        return torch.stack([self._temporal, torch.full_like(self._temporal, self.heads_profiled)])

    def _tables_for(self, length: int, device) -> _Tables:
        key = (length, str(device))
        if key not in self._tables:
            self._tables[key] = self._make_tables(length, device)
        return self._tables[key]

    def _make_tables(self, length: int, device) -> _Tables:
        """The orders and the sampled queries' key masks, made on the host once per size and
        uploaded (host numpy: SAMPLES × N booleans, 4.8 MB at 720p)."""
        valid, block, mask = self.mask.tokens, self.mask.block, self.mask.mask
        order = token_major_order(self.frames, self.frame_tokens, length)
        inverse = np.argsort(order)
        n = min(SAMPLES, valid)
        samples = (np.arange(n) * valid) // n + valid // (2 * n)  # evenly spread, the first half a step in
        keys = np.arange(valid)
        spatial = mask[samples[:, None] // block, keys[None, :] // block]
        temporal = mask[inverse[samples][:, None] // block, inverse[keys][None, :] // block]
        arrays = (order, inverse, np.arange(length), samples, spatial, temporal)
        # first used mid-loop (the first sparse step): from pinned memory, the host not waiting
        return _Tables(*(_upload(np.ascontiguousarray(a), device) for a in arrays))


def _attend(scores: torch.Tensor, allowed: torch.Tensor | None, v: torch.Tensor) -> torch.Tensor:
    """softmax(scores) · v in float32 for (B, h, n, N) float32 scores, keys outside `allowed`
    (n, N) left out; the product in v's dtype. Every sample sees at least its own block, so no
    row is empty."""
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.einsum("bhsl,blhd->bhsd", torch.softmax(scores, -1).to(v.dtype), v).float()


def _gather(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """t (B, L, H, D) with its tokens taken per (sequence, head) by index (B, L, H)."""
    return torch.gather(t, 1, index[..., None].expand(*index.shape, t.shape[-1]))
