"""A controller's work in a generation (parallel/work.py decides it from the mesh) and the one
gather of its tokens for the VAE."""

from __future__ import annotations

from ..config import RunSpec
from ..parallel.work import RankWork, rank_work

__all__ = ["RankWork", "local_work", "gather_latent_tokens"]


def local_work(spec: RunSpec, tokens: int, backend) -> RankWork:
    """This controller's work: a rank's under torchrun, everything for a single controller."""
    return rank_work(spec.mesh, len(spec.video.prompts), tokens, None if backend.single_controller else backend.rank)


def gather_latent_tokens(local, work: RankWork, spec: RunSpec, backend):
    """The one gather, for the VAE: tokens over cp, then each dp group's prompts; padding
    dropped. A single controller already holds the global array."""
    if work.whole:
        return local[:, : work.shards.tokens]
    ops = backend.ops
    tokens = backend.gather_tokens(local)[:, : work.shards.tokens]
    if work.cfg_branch is None and spec.mesh.dp > 1:
        tokens = ops.concat(backend.exchange_dp(tokens), axis=0)
    return tokens
