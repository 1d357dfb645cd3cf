"""The self-attention callable for a mesh: local, Ulysses, ring, or Ulysses inside a ring.

Sequence layout (the pipeline shards tokens this way): the valid tokens, N of them, are padded
at the end to cp·Lc; cp rank c = ring_index·ulysses + ulysses_index holds global positions
[c·Lc, (c+1)·Lc). After the Ulysses all-to-all a ring member therefore holds the U·Lc
contiguous positions starting at ring_index·U·Lc, which is the block layout the ring expects.
Padded keys are left out exactly; padded queries get finite values that the pipeline drops.

Messages go through the mesh's collectives (`mesh.comm`): torch.distributed in a run, null,
counting or loopback ones in the planner and the benchmarks — the same code either way.
Only self-attention lives here: cross-attention attends to the replicated text and stays local.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .attention import KernelChoice, LseAttention
from .ring import RingPeers, ring_attention
from .ulysses import heads_to_sequence, sequence_to_heads

SelfAttention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def make_self_attention(
    mesh, valid_tokens: int, local_tokens: int, kernel: LseAttention | None = None, sparse=None
) -> SelfAttention:
    """The callable `attention(q, k, v) -> out`, all (B, local_tokens, H, D), for this rank of
    `mesh` (a `TorchMesh`). valid_tokens: N, the unpadded global token count;
    local_tokens: Lc, this rank's share (cp·Lc ≥ N). kernel: the attention over one key block —
    a backend's `KernelChoice` (None: a new one for attention_impl=auto), or a stand-in with its
    signature (the planner's, which only makes the output buffers). sparse: sparse=radial's
    `sparse_attention.SparseAttention`; on the calls it takes (the blocks after the dense ones
    of the steps after the dense ones) it runs instead of `kernel`, the same way over the mesh
    (Ulysses: the same mask for every head; ring: each block by its global positions)."""
    dense = _self_attention(mesh, valid_tokens, local_tokens, kernel, None)
    if sparse is None:
        return dense
    sparse_attention = _self_attention(mesh, valid_tokens, local_tokens, kernel, sparse)

    def switched(q, k, v):
        if not sparse.takes_layer():  # a dense step, or one of its first sparse_dense_layers blocks
            return dense(q, k, v)
        sparse.count(q.shape[0])
        return sparse_attention(q, k, v)

    switched.__name__ = f"sparse_{dense.__name__}"
    return switched


def _self_attention(mesh, valid_tokens: int, local_tokens: int, kernel, sparse) -> SelfAttention:
    kernel = KernelChoice() if kernel is None else kernel
    cp, ulysses, ring = mesh.size("cp"), mesh.size("ulysses"), mesh.size("ring")
    if local_tokens < 1:
        raise ValueError(f"local_tokens={local_tokens}: every rank holds at least one (possibly padded) token")
    if not 1 <= valid_tokens <= cp * local_tokens:
        raise ValueError(
            f"valid_tokens={valid_tokens} does not fit cp×local_tokens={cp}×{local_tokens}={cp * local_tokens}; "
            f"pad the sequence to cp·local_tokens ≥ valid_tokens ≥ 1 (local_tokens = ceil(valid_tokens / cp))"
        )

    def check(q: torch.Tensor) -> None:
        if q.shape[1] != local_tokens:
            raise ValueError(
                f"self-attention got {q.shape[1]} tokens on this rank but was made for local_tokens={local_tokens}; "
                "shard the sequence with the layout the attention was made with"
            )

    if cp == 1:
        whole = kernel.one_device() if isinstance(kernel, KernelChoice) else None
        if valid_tokens == local_tokens and whole is not None and sparse is None:
            return whole

        def padded_local(q, k, v):
            check(q)
            if sparse is not None:
                return sparse(q, k, v, 0, 0, valid_tokens)[0]
            return kernel(q, k, v, valid_keys=valid_tokens if valid_tokens < local_tokens else None)[0]

        return padded_local

    comm = mesh.comm
    peers = RingPeers.from_ranks(mesh.ranks("ring"), mesh.index("ring"), comm, mesh.group("ring"))
    u_group = mesh.group("ulysses")

    def sequence_parallel(q, k, v):
        check(q)
        if ulysses > 1:
            q, k, v = sequence_to_heads((q, k, v), u_group, ulysses, comm)
        out = ring_attention(q, k, v, peers, valid_keys=valid_tokens, kernel=kernel, sparse=sparse)
        return heads_to_sequence(out, u_group, ulysses, comm) if ulysses > 1 else out

    sequence_parallel.__name__ = f"ulysses{ulysses}_ring{ring}_attention"
    return sequence_parallel
