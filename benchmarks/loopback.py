"""One rank's work on one device: the mesh's collectives are loopback ones.

`benchmarks/step.py` times what a single rank of a Ulysses × ring mesh computes, on one GPU.
The production self-attention (`sequence_parallel.make_self_attention`) runs unchanged on a
mesh built with `LoopbackCollectives` (backends/torch/collectives.py):

- the all-to-all copies the send buffer into the receive buffer, so the rank gets tensors of
  exactly the post-exchange shapes (U·Lc tokens of H/U heads) — made of its own tokens;
- a ring hop "receives" the block it sent, so each of the R steps runs attention on a block of
  the real shape and merges it by log-sum-exp, as a real ring member does.

The values are not those of a real mesh (the keys are the rank's own tokens, repeated), but
every kernel runs at its real shape, so the time is the rank's compute plus local copies of
the same bytes the network would carry. `diffusers_attention` builds the same rearrangement
around diffusers' attention, so the two models compute the same function and can be compared
number for number.
"""

from __future__ import annotations

import torch

from parallel_wan.backends.torch.collectives import LoopbackCollectives
from parallel_wan.backends.torch.mesh import TorchMesh
from parallel_wan.backends.torch.ring import block_valid_keys
from parallel_wan.backends.torch.sequence_parallel import make_self_attention
from parallel_wan.backends.torch.ulysses import heads_to_sequence, sequence_to_heads
from parallel_wan.parallel.mesh import MeshSpec

LOOPBACK = LoopbackCollectives()


def loopback_mesh(ulysses: int, ring: int) -> TorchMesh:
    """Rank 0 of a U × R mesh whose messages come back to it."""
    spec = MeshSpec(f"loopback_u{ulysses}_r{ring}", cp=ulysses * ring, ulysses=ulysses, ring=ring)
    return TorchMesh.build(spec, LOOPBACK)


def rank_attention(ulysses: int, ring: int, valid_tokens: int, local_tokens: int, kernel=None):
    """Our self-attention as rank 0 of the mesh runs it, on loopback collectives (`kernel`: the
    `KernelChoice` it runs, which reports and forces kernels; None: a new one, auto's)."""
    return make_self_attention(loopback_mesh(ulysses, ring), valid_tokens, local_tokens, kernel)


def gathered_keys(x: torch.Tensor, ring: int, valid_tokens: int) -> torch.Tensor:
    """The keys (or values) our loopback ring lets rank 0 see, in one tensor: each of the R
    hops brings back its own block, of which `block_valid_keys` are real."""
    length = x.shape[1]
    parts = [x[:, : block_valid_keys(valid_tokens, ((0 - step) % ring) * length, length)] for step in range(ring)]
    return torch.cat(parts, dim=1) if ring > 1 else parts[0]


def diffusers_attention(ulysses: int, ring: int, valid_tokens: int, attend):
    """Wrap diffusers' attention `attend(q, k, v)` ((B, L, H, D) each) with the same loopback
    exchange as ours: Ulysses all-to-all in and out, and the whole K/V the ring would bring
    (diffusers' own "ring" all-gathers K and V)."""

    def attention(q, k, v):
        if ulysses > 1:
            q, k, v = sequence_to_heads((q, k, v), None, ulysses, LOOPBACK)
        if ring > 1 or valid_tokens < k.shape[1]:
            k, v = gathered_keys(k, ring, valid_tokens), gathered_keys(v, ring, valid_tokens)
        out = attend(q, k, v)
        return heads_to_sequence(out, None, ulysses, LOOPBACK) if ulysses > 1 else out

    return attention
