"""How the token sequence is split over the cp ranks (host-side, backend-agnostic).

The N tokens of a latent are padded at the END to cp·Lc; cp rank c holds [c·Lc, (c+1)·Lc).
Padding at the end keeps every rank's slice contiguous (RoPE positions and the gather are
plain ranges) and makes padded keys a suffix of the last blocks, so attention masks them
exactly by counting, not by a mask tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SequenceShards:
    tokens: int  # N, valid tokens
    cp: int

    @property
    def local(self) -> int:
        """Lc: tokens per rank, padding included."""
        return max(1, math.ceil(self.tokens / self.cp))

    @property
    def padded(self) -> int:
        return self.local * self.cp

    @property
    def padding(self) -> int:
        return self.padded - self.tokens

    def bounds(self, cp_index: int) -> tuple[int, int]:
        start = cp_index * self.local
        return start, start + self.local

    def token_index(self, cp_index: int) -> np.ndarray:
        """Global positions of rank `cp_index`'s tokens; values ≥ N are padding."""
        start, stop = self.bounds(cp_index)
        return np.arange(start, stop)

    def valid(self, cp_index: int) -> int:
        """How many of rank `cp_index`'s tokens are real (the rest are padding)."""
        start, stop = self.bounds(cp_index)
        return max(0, min(stop, self.tokens) - start)

    def shard(self, full: np.ndarray, cp_index: int, axis: int = 1) -> np.ndarray:
        """This rank's slice of a host array whose `axis` runs over the N tokens (zero-padded)."""
        widths = [(0, 0)] * full.ndim
        widths[axis] = (0, self.padding)
        padded = np.pad(full, widths)
        start, stop = self.bounds(cp_index)
        return np.take(padded, np.arange(start, stop), axis=axis)
