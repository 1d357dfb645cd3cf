"""Ulysses all-to-all: trade a sequence shard of every head for the whole group's sequence of
a slice of the heads, and back (Jacobs et al. 2023, "DeepSpeed Ulysses").

Attention is independent per head, so after the exchange each rank runs ordinary attention on
U·Lc tokens for H/U heads. Each all-to-all moves (U−1)/U of the local tensor; the heads must
divide by U. Ranks of the group are in ulysses-index order, so the gathered sequence is the
group's shards concatenated in order — contiguous global positions. The all-to-all goes
through the `comm` it is given (parallel/collectives.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ...parallel.collectives import Collectives


def check_heads(heads: int, size: int) -> None:
    if heads % size:
        fits = [u for u in range(1, size + 1) if heads % u == 0]
        raise ValueError(
            f"ulysses={size} does not divide the {heads} attention heads; set mesh.ulysses to a divisor of {heads} "
            f"(e.g. {max(fits)}) and give the rest of cp to mesh.ring, which has no head limit"
        )


def sequence_to_heads(xs: Sequence[torch.Tensor], group, size: int, comm: Collectives) -> list[torch.Tensor]:
    """(B, Lc, H, D) each, sequence-sharded → (B, U·Lc, H/U, D) each, head-sharded.
    All tensors (q, k, v) travel in one all-to-all: one launch and one latency, not three."""
    n = len(xs)
    b, lc, h, d = xs[0].shape
    check_heads(h, size)
    # (n, B, Lc, U, H/U, D) → destination rank first: all_to_all_single splits dim 0.
    send = torch.stack(tuple(xs)).reshape(n, b, lc, size, h // size, d).permute(3, 0, 1, 2, 4, 5).contiguous()
    recv = torch.empty_like(send)
    comm.all_to_all(recv, send, group)
    # recv[j] = rank j's tokens for our heads → (n, B, U, Lc, H/U, D): source rank = sequence chunk.
    gathered = recv.permute(1, 2, 0, 3, 4, 5).reshape(n, b, size * lc, h // size, d)
    return list(gathered.unbind(0))


def heads_to_sequence(x: torch.Tensor, group, size: int, comm: Collectives) -> torch.Tensor:
    """(B, U·Lc, H/U, D), head-sharded → (B, Lc, H, D), sequence-sharded: the inverse."""
    b, l, hu, d = x.shape
    if l % size:
        raise ValueError(f"Ulysses output has {l} tokens, not a multiple of ulysses={size}; it must be U·local_tokens")
    lc = l // size
    send = x.reshape(b, size, lc, hu, d).permute(1, 0, 2, 3, 4).contiguous()
    recv = torch.empty_like(send)
    comm.all_to_all(recv, send, group)
    # recv[j] = our tokens for rank j's heads → (B, Lc, U, H/U, D): source rank = head slice.
    return recv.permute(1, 2, 0, 3, 4).reshape(b, lc, size * hu, d)
