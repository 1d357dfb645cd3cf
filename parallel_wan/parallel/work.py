"""What one controller computes: a slice of the token sequence, for a set of prompts, with one
or both CFG halves (cfg_rows.py has their order).

Under torchrun every rank is a controller of its own device and computes its slice. A
single-controller backend (JAX) drives every device from one process: its work is the whole
padded sequence and every prompt, as global arrays the backend shards itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .mesh import MeshSpec
from .shards import SequenceShards


@dataclass(frozen=True)
class RankWork:
    shards: SequenceShards
    cp_index: int | None  # None: the whole padded sequence (single controller)
    rows: tuple[int, ...]  # indices of the prompts denoised here (one batch)
    cfg_branch: int | None  # 0 = cond, 1 = uncond (CFG parallel over dp); None = both here

    @property
    def whole(self) -> bool:
        return self.cp_index is None

    def token_index(self) -> np.ndarray:
        """Global positions of this work's tokens; values ≥ N are padding."""
        if self.whole:
            return np.arange(self.shards.padded)
        return self.shards.token_index(self.cp_index)

    def local(self, full_tokens, backend):
        """This work's tokens of a (B, N, F) device array, zero-padded past N."""
        ops = backend.ops
        pad = self.shards.padding
        if pad:
            full_tokens = ops.pad(full_tokens, [(0, 0), (0, pad), (0, 0)])
        if self.whole:
            return full_tokens
        start, stop = self.shards.bounds(self.cp_index)
        return full_tokens[:, start:stop]

    def local_host(self, full: np.ndarray, axis: int = 0) -> np.ndarray:
        """This work's slice of a host array whose `axis` runs over the N tokens (zero-padded)."""
        if self.whole:
            widths = [(0, 0)] * full.ndim
            widths[axis] = (0, self.shards.padding)
            return np.pad(full, widths)
        return self.shards.shard(full, self.cp_index, axis=axis)


def cfg_parallel(mesh: MeshSpec, prompts: int) -> bool:
    """One prompt on dp = 2: the dp ranks run its two CFG halves (config.resolve allows dp > 1
    with one prompt only then)."""
    return prompts == 1 and mesh.dp == 2


def rank_work(mesh: MeshSpec, prompts: int, tokens: int, rank: int | None) -> RankWork:
    """The work of `rank` (None: a single controller, everything). dp carries the CFG halves of
    one prompt (dp = 2), or splits several prompts into equal batches; cp splits the tokens.
    config.resolve has checked the counts fit."""
    shards = SequenceShards(tokens, mesh.cp)
    if rank is None:
        return RankWork(shards, None, prompt_rows(mesh, prompts, rank), None)
    coords = mesh.coords(rank)
    branch = coords["dp"] if cfg_parallel(mesh, prompts) else None
    return RankWork(shards, coords["cp"], prompt_rows(mesh, prompts, rank), branch)


def prompt_rows(mesh: MeshSpec, prompts: int, rank: int | None) -> tuple[int, ...]:
    """The prompts `rank` denoises (None: a single controller, every one): all of them under
    CFG parallel, else its dp group's equal share."""
    if rank is None or cfg_parallel(mesh, prompts):
        return tuple(range(prompts))
    per = prompts // mesh.dp
    first = mesh.coords(rank)["dp"] * per
    return tuple(range(first, first + per))
