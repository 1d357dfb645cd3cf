"""Ring attention: each member keeps its queries and passes its key/value block around the ring.

After `size` steps every query block has met every key block; the partial outputs are merged
by their log-sum-exps, which is exact (softmax over a union of key sets). Per step the next
block's transfer is posted before the current block's attention starts, so the send/recv runs
while the kernel computes (Liu et al. 2023, "Ring Attention with Blockwise Transformers").
Each member sends and receives one K/V block per step: (size−1)·|K/V block| bytes per layer,
the minimum for a ring, with two blocks live at a time: the one in use and the one arriving.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ...parallel.collectives import Collectives
from .attention import LseAttention, attention_with_lse, lse_dtype


# ---------------------------------------------------------------- merging partial results
def merge_two(out_a, lse_a, out_b, lse_b):
    """Attention over the keys of two blocks, from each block's (out (B,S,H,D), lse (B,S,H)).

    Weights are exp(lse_block − lse_total) ≤ 1, so nothing overflows. A block with no keys has
    lse = −inf and weight 0; where both are empty the result stays (0, −inf) — the reference
    point is set to 0 there, since −inf − (−inf) would be NaN.
    Returns (out, lse) in at least float32.
    """
    dt = lse_dtype(out_a.dtype)
    lse_a, lse_b = lse_a.to(dt), lse_b.to(dt)
    lse = torch.logaddexp(lse_a, lse_b)
    ref = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    w_a = torch.exp(lse_a - ref).unsqueeze(-1)
    w_b = torch.exp(lse_b - ref).unsqueeze(-1)
    return w_a * out_a.to(dt) + w_b * out_b.to(dt), lse


def merge_partials(outs: Sequence[torch.Tensor], lses: Sequence[torch.Tensor]):
    """Fold partial attention results over disjoint key blocks into the full result.
    outs: (B, S, H, D) each; lses: (B, S, H) each. Returns (out, lse) in at least float32."""
    if len(outs) != len(lses) or not outs:
        raise ValueError(
            f"merge_partials needs one lse per output and at least one of each; got {len(outs)} and {len(lses)}"
        )
    dt = lse_dtype(outs[0].dtype)
    out, lse = outs[0].to(dt), lses[0].to(dt)
    for o, l in zip(outs[1:], lses[1:]):
        out, lse = merge_two(out, lse, o, l)
    return out, lse


# ---------------------------------------------------------------- the ring
@dataclass(frozen=True)
class RingPeers:
    """This rank's place in its ring: neighbours are global ranks, reached through `comm`."""

    size: int
    index: int
    send_to: int
    recv_from: int
    comm: Collectives
    group: Any = None

    @classmethod
    def from_ranks(cls, ranks: Sequence[int], index: int, comm: Collectives, group=None) -> RingPeers:
        n = len(ranks)
        return cls(n, index, ranks[(index + 1) % n], ranks[(index - 1) % n], comm, group)


def start_pass(send: torch.Tensor, recv: torch.Tensor, peers: RingPeers) -> list:
    """Post one ring hop: send our current block forward, receive the previous member's.
    Returns the pending works; the caller waits on them after its compute."""
    return peers.comm.exchange([(send, peers.send_to)], [(recv, peers.recv_from)], peers.group)


def block_valid_keys(valid_keys: int, offset: int, length: int) -> int:
    """Real keys in the block at global positions [offset, offset + length): padding is the
    tail of the global sequence, so a block's real keys are a prefix of it."""
    return max(0, min(length, valid_keys - offset))


def ring_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    peers: RingPeers,
    valid_keys: int,
    scale: float | None = None,
    kernel: LseAttention = attention_with_lse,
    sparse=None,
) -> torch.Tensor:
    """Attention of this member's queries over the keys of every ring member.

    q, k, v: (B, Lb, H, D), the tokens at global positions [index·Lb, (index+1)·Lb) (in the
    Ulysses hybrid: after the all-to-all, for this rank's heads). Keys at global positions
    ≥ valid_keys are padding and are left out exactly. Returns (B, Lb, H, D) in q's dtype.
    kernel: `attention_with_lse`, a backend's `attention.KernelChoice`, or a stand-in with their
    signature (the planner's, on meta).
    sparse: a `sparse_attention.SparseAttention` to run instead of `kernel` (sparse=radial's
    sparse steps): it is told the global positions of the queries and of each block's keys,
    and a block none of whose keys these queries may see is skipped like a padding block.
    """
    length = k.shape[1]
    kv = torch.stack((k, v)) if peers.size > 1 else None  # one message per hop, not two
    block_k, block_v = k, v
    out = lse = None
    for step in range(peers.size):
        pending = None
        if step + 1 < peers.size:
            incoming = torch.empty_like(kv)
            pending = start_pass(kv, incoming, peers)  # before the compute, so they overlap
        source = (peers.index - step) % peers.size
        n = block_valid_keys(valid_keys, source * length, length)
        if sparse is not None and n > 0 and sparse.skips(peers.index * q.shape[1], q.shape[1], source * length, n):
            n = 0  # the mask lets none of our queries see this block: exp(−inf) = 0 as for padding
        if n > 0:  # a block of padding only would add exp(−inf) = 0: skip its kernel
            if sparse is not None:
                o, l = sparse(q, block_k, block_v, peers.index * q.shape[1], source * length, n, scale)
            else:
                o, l = kernel(q, block_k, block_v, valid_keys=n, scale=scale)
            out, lse = (o.to(lse_dtype(o.dtype)), l) if out is None else merge_two(out, lse, o, l)
        if pending is not None:
            for work in pending:
                work.wait()
            kv = incoming
            block_k, block_v = kv[0], kv[1]
    if out is None and sparse is not None:
        return torch.zeros_like(q)  # padding queries only (every real query sees its own block)
    if out is None:
        raise ValueError(
            f"valid_keys={valid_keys}: no key is real, attention is undefined; the sequence needs ≥ 1 token"
        )
    return out.to(q.dtype)
