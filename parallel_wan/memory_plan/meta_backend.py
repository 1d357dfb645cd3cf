"""The PyTorch backend as rank 0 of the run's mesh sees it, on the meta device: the planner
builds the run's own noise predictor and VAE band decode on it and counts what they hold.

Two things differ from a run, both passed in rather than patched: the collectives send
nothing (`NullCollectives`: receive buffers are made as in a run, never written), and the
attention kernels only make their outputs — on meta tensors SDPA would take its math path and
count a score matrix that no GPU or CPU flash kernel makes.
"""

from __future__ import annotations

import torch

from ..backends.torch import ops as torch_ops
from ..backends.torch.attention import lse_dtype
from ..backends.torch.backend import TorchBackend
from ..backends.torch.collectives import NullCollectives
from ..backends.torch.mesh import TorchMesh
from ..parallel.mesh import MeshSpec

META = torch.device("meta")


def kernel_outputs(q, k, v, valid_keys=None, scale=None):
    """`attention.attention_with_lse` as a fused kernel leaves it: the output and the
    log-sum-exp (B, S, H) in at least fp32, and nothing else."""
    lse = torch.empty(q.shape[:3], dtype=lse_dtype(q.dtype), device=q.device)
    return torch.empty_like(q), lse


class FusedAttentionOps:
    """The torch ops namespace whose plain attention (cross-attention, the VAE's) keeps what a
    fused kernel keeps: output and log-sum-exp."""

    def __getattr__(self, name):
        return getattr(torch_ops, name)

    @staticmethod
    def attention(q, k, v, scale=None):
        out, lse = kernel_outputs(q, k, v)
        del lse
        return out


class MetaBackend(TorchBackend):
    """`TorchBackend` for rank 0 of `mesh`, on meta tensors, with null collectives: an ordinary
    construction (a backend changes no process-wide state), only the self-attention kernel
    differs."""

    def __init__(self, mesh: MeshSpec):
        super().__init__(
            META, TorchMesh.build(mesh, NullCollectives(rank=0, world=mesh.world_size)), ops=FusedAttentionOps()
        )

    def self_attention_for(self, shards, sparse=None):
        """sparse: sparse=svg's attention (memory_plan/denoise_bytes.py hands it in): its profile
        and its gathers run on meta and are counted, its kernel only makes its outputs."""
        from ..backends.torch.sequence_parallel import make_self_attention

        sparse = None if sparse is None else sparse.counted_by(kernel_outputs)
        return make_self_attention(self.mesh, shards.tokens, shards.local, kernel=kernel_outputs, sparse=sparse)
