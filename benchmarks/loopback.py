"""One rank's work on one device: the mesh's collectives replaced by local copies.

`benchmarks/step.py` times what a single rank of a Ulysses × ring mesh computes, on one GPU.
The production self-attention (`sequence_parallel.make_self_attention`) runs unchanged; only
`torch.distributed`, as `ulysses.py` and `ring.py` see it, is swapped for a loopback:

- all_to_all_single copies the send buffer into the receive buffer, so the rank gets tensors of
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

import contextlib
from dataclasses import dataclass

import torch

from parallel_wan.backends.torch import ring as ring_module
from parallel_wan.backends.torch import ulysses as ulysses_module
from parallel_wan.backends.torch.ring import block_valid_keys
from parallel_wan.backends.torch.sequence_parallel import make_self_attention


class _Work:
    def wait(self):
        return None


class LoopbackDist:
    """The few `torch.distributed` calls ulysses.py and ring.py make, on one device."""

    @staticmethod
    def all_to_all_single(output, input, group=None):
        output.copy_(input)
        return _Work()

    @staticmethod
    def isend(*args, **kwargs):  # only used as a tag inside P2POp
        raise RuntimeError("loopback: isend runs only through batch_isend_irecv")

    @staticmethod
    def irecv(*args, **kwargs):
        raise RuntimeError("loopback: irecv runs only through batch_isend_irecv")

    @dataclass
    class P2POp:
        op: object
        tensor: torch.Tensor
        peer: int
        group: object = None

    @classmethod
    def batch_isend_irecv(cls, p2p_ops):
        sends = [p.tensor for p in p2p_ops if p.op is cls.isend]
        recvs = [p.tensor for p in p2p_ops if p.op is cls.irecv]
        for send, recv in zip(sends, recvs, strict=True):
            recv.copy_(send)
        return [_Work()]


@contextlib.contextmanager
def loopback_collectives():
    """Within the block, ulysses.py and ring.py talk to `LoopbackDist`."""
    saved = ulysses_module.dist, ring_module.dist
    ulysses_module.dist = ring_module.dist = LoopbackDist
    try:
        yield
    finally:
        ulysses_module.dist, ring_module.dist = saved


@dataclass(frozen=True)
class LoopbackMesh:
    """The `TorchMesh` interface `make_self_attention` reads, for rank 0 of a U × R mesh."""

    ulysses: int
    ring: int

    def size(self, axis: str) -> int:
        return {"cp": self.ulysses * self.ring, "ulysses": self.ulysses, "ring": self.ring}.get(axis, 1)

    def ranks(self, axis: str) -> list[int]:
        return list(range(self.size(axis)))

    def index(self, axis: str) -> int:
        return 0

    def group(self, axis: str):
        return None


def rank_attention(ulysses: int, ring: int, valid_tokens: int, local_tokens: int):
    """Our self-attention as rank 0 of the mesh runs it (call it inside `loopback_collectives`)."""
    return make_self_attention(LoopbackMesh(ulysses, ring), valid_tokens, local_tokens)


def gathered_keys(x: torch.Tensor, ring: int, valid_tokens: int) -> torch.Tensor:
    """The keys (or values) our loopback ring lets rank 0 see, in one tensor: each of the R
    hops brings back its own block, of which `block_valid_keys` are real."""
    length = x.shape[1]
    parts = [x[:, : block_valid_keys(valid_tokens, ((0 - step) % ring) * length, length)] for step in range(ring)]
    return torch.cat(parts, dim=1) if ring > 1 else parts[0]


def diffusers_attention(ulysses: int, ring: int, valid_tokens: int, attend):
    """Wrap diffusers' attention `attend(q, k, v)` ((B, L, H, D) each) with the same loopback
    exchange as ours: Ulysses all-to-all in and out, and the whole K/V the ring would bring
    (diffusers' own "ring" all-gathers K and V). Call inside `loopback_collectives`."""

    def attention(q, k, v):
        if ulysses > 1:
            q, k, v = ulysses_module.sequence_to_heads((q, k, v), None, ulysses)
        if ring > 1 or valid_tokens < k.shape[1]:
            k, v = gathered_keys(k, ring, valid_tokens), gathered_keys(v, ring, valid_tokens)
        out = attend(q, k, v)
        return ulysses_module.heads_to_sequence(out, None, ulysses) if ulysses > 1 else out

    return attention
