"""A block mask over the global sequence, cut to what one attention call computes: the queries
at global positions [q_start, q_start + q_len) against the keys at [k_start, k_start + keys).

Under sequence parallelism a rank's queries and a ring step's keys are slices of the global
sequence that need not start on a block boundary (75600 tokens over 8 ranks: 9450 each, not a
multiple of 64), so the mask is never re-blocked locally: a call visits whole GLOBAL blocks,
and the kernel keeps only the rows and keys of each that the call holds. Token (r, c) is
attended iff mask[r // block, c // block], however the sequence is split — that is what makes
every mesh give the one-device result. Numpy only: computed once per (rank, ring step).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Visits:
    """Query block p (global block first_q_block + p) visits the global key blocks
    table[p, :counts[p]]; a query block past the mask (padding only) visits none."""

    first_q_block: int
    table: np.ndarray  # (query blocks, width) int32, global key-block indices, padded with 0
    counts: np.ndarray  # (query blocks,) int32

    @property
    def empty(self) -> bool:
        """No query of the call sees any of its keys: its result is (0, lse −inf) without a kernel."""
        return not self.counts.any()


@dataclass(frozen=True)
class BlockMask:
    mask: np.ndarray  # (nb, nb) bool: query block → key blocks, over the global sequence
    block: int  # tokens per block
    tokens: int  # the valid tokens N (nb = ceil(N / block)); past N is padding

    def visits(self, q_start: int, q_len: int, k_start: int, keys: int) -> Visits:
        """The blocks the call with these queries and `keys` valid keys from k_start visits."""
        b, nb = self.block, self.mask.shape[0]
        first = q_start // b
        last = min(-(-(q_start + q_len) // b), nb)  # query blocks past nb hold padding only
        k_lo, k_hi = k_start // b, min(-(-(k_start + keys) // b), nb) if keys > 0 else k_start // b
        rows = self.mask[first:last, k_lo:k_hi] if last > first else np.zeros((0, 0), dtype=bool)
        n_q = max(-(-(q_start + q_len) // b) - first, 0)
        counts = np.zeros(n_q, dtype=np.int32)
        counts[: rows.shape[0]] = rows.sum(1)
        table = np.zeros((n_q, max(int(counts.max(initial=0)), 1)), dtype=np.int32)
        for p, row in enumerate(rows):
            hit = np.flatnonzero(row) + k_lo
            table[p, : len(hit)] = hit
        return Visits(first, table, counts)

    def block_density(self) -> float:
        """The fraction of (query block, key block) pairs visited."""
        return float(self.mask.mean())

    def visited_pairs(self) -> int:
        """(query, key) token pairs attended over the valid sequence: blocks weighted by their
        real tokens (the last block may be partial)."""
        sizes = np.minimum(self.block, self.tokens - np.arange(self.mask.shape[0]) * self.block)
        return int(sizes @ self.mask.astype(np.int64) @ sizes)

    def skipped_flops(self, rows: int, heads: int, head_dim: int) -> int:
        """The FLOPs one self-attention over the whole sequence skips for `rows` sequences:
        2·D per QKᵀ and per PV product, for each pair not visited."""
        skipped = self.tokens * self.tokens - self.visited_pairs()
        return 4 * rows * heads * head_dim * skipped
