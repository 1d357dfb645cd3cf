"""`parallel.collectives.Collectives` for PyTorch: over torch.distributed, and the stand-ins
the planner and the benchmarks run the real parallel code with.

- ProcessGroupCollectives: torch.distributed (NCCL on CUDA, gloo on CPU) — the run's.
- NullCollectives: sends nothing; receive buffers are zero-filled (a buffer made with
  `empty` holds whatever memory it was handed: NaN bit patterns after a busy process). The
  planner runs rank 0's code on meta tensors with it: the same buffers, no messages.
- LoopbackCollectives: each message comes back to its sender (all-to-all and ring hops copy
  the send buffer into the receive buffer), so one device computes one rank's work at its
  real shapes (benchmarks/step.py).
- CountingCollectives: wraps another and counts the bytes this rank sends, per operation.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch
import torch.distributed as dist


class _Done:
    def wait(self):
        return None


class ProcessGroupCollectives:
    """The collectives of the job's torch.distributed process group."""

    @property
    def rank(self) -> int:
        return dist.get_rank() if dist.is_initialized() else 0

    def size(self, group=None) -> int:
        return dist.get_world_size(group) if dist.is_initialized() else 1

    def new_group(self, ranks: Sequence[int]):
        """None without a process group (one process): every axis is then trivial."""
        return dist.new_group(list(ranks)) if dist.is_initialized() else None

    def all_to_all(self, recv, send, group=None) -> None:
        dist.all_to_all_single(recv, send, group=group)

    def exchange(self, sends, recvs, group=None) -> list:
        ops = [dist.P2POp(dist.isend, t, peer, group) for t, peer in sends]
        ops += [dist.P2POp(dist.irecv, t, peer, group) for t, peer in recvs]
        return dist.batch_isend_irecv(ops) if ops else []

    def all_gather(self, parts, tensor, group=None) -> None:
        dist.all_gather(parts, tensor, group=group)

    def broadcast(self, tensor, src: int = 0) -> None:
        dist.broadcast(tensor, src=src)

    def broadcast_object(self, obj, src: int = 0):
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def send(self, tensor, dst: int) -> None:
        dist.send(tensor, dst)

    def recv(self, tensor, src: int) -> None:
        dist.recv(tensor, src)

    _vote_group = False  # not made yet (None: the default group)

    def vote(self, flag: bool) -> bool:
        """One int32 MAX all-reduced on the host, never a device tensor, so asking costs no GPU
        sync. Under NCCL a gloo group over every rank is made at the first vote, which every
        rank reaches at the same point."""
        if not dist.is_initialized() or dist.get_world_size() == 1:
            return flag
        if self._vote_group is False:
            self._vote_group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        ballot = torch.tensor([int(flag)], dtype=torch.int32)
        dist.all_reduce(ballot, op=dist.ReduceOp.MAX, group=self._vote_group)
        return bool(ballot.item())


class NullCollectives:
    """Rank `rank` of a job of `world` ranks whose messages are left out: every operation
    returns at once with its receive buffers zero-filled, so a benchmark that decodes for real
    with it computes on defined values (on meta tensors the fill is a no-op)."""

    def __init__(self, rank: int = 0, world: int = 1):
        self.rank, self.world = rank, world

    def size(self, group=None) -> int:
        return self.world if group is None else len(group)

    def new_group(self, ranks):
        return tuple(ranks)

    def all_to_all(self, recv, send, group=None) -> None:
        recv.zero_()

    def exchange(self, sends, recvs, group=None) -> list:
        for buffer, _peer in recvs:
            buffer.zero_()
        return []

    def all_gather(self, parts, tensor, group=None) -> None:
        for part in parts:
            part.zero_()

    def broadcast(self, tensor, src: int = 0) -> None:
        return None

    def broadcast_object(self, obj, src: int = 0):
        return obj

    def send(self, tensor, dst: int) -> None:
        return None

    def recv(self, tensor, src: int) -> None:
        tensor.zero_()

    def vote(self, flag: bool) -> bool:
        return flag  # the other ranks' ballots are left out with their messages


class LoopbackCollectives(NullCollectives):
    """Every message this rank sends comes back to it: the tensors after an exchange have the
    shapes a real mesh gives (U·Lc tokens of H/U heads after Ulysses; a whole K/V block per ring
    hop) but hold this rank's own values. The time is the rank's compute plus local copies of
    the bytes the network would carry."""

    def all_to_all(self, recv, send, group=None) -> None:
        recv.copy_(send)

    def exchange(self, sends, recvs, group=None) -> list:
        for (send, _), (recv, _) in zip(sends, recvs, strict=True):
            recv.copy_(send)
        return [_Done()]

    def all_gather(self, parts, tensor, group=None) -> None:
        for part in parts:
            part.copy_(tensor)


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class CountingCollectives:
    """`inner`'s collectives, counting what this rank sends. `by_call` {operation: bytes},
    `calls` {operation: count}, `total` (bytes). What counts as sent:

    - all_to_all: every slice of the send buffer except the one addressed to this rank;
    - exchange: the tensors of its sends; send: the tensor;
    - all_gather: (W − 1) × the local tensor — every rank must receive the W − 1 others'
      tensors, so with balanced load each sends that much (gloo's ring all_gather does);
    - broadcast: (W − 1) × the tensor on the source, 0 elsewhere (a flat broadcast; a tree
      spreads the same total over more ranks); broadcast_object is counted as a call only.
    """

    def __init__(self, inner):
        self.inner = inner
        self.by_call: dict[str, int] = defaultdict(int)
        self.calls: dict[str, int] = defaultdict(int)

    @property
    def rank(self) -> int:
        return self.inner.rank

    @property
    def total(self) -> int:
        return sum(self.by_call.values())

    def reset(self) -> None:
        self.by_call.clear()
        self.calls.clear()

    def _count(self, name: str, sent: int) -> None:
        self.calls[name] += 1
        self.by_call[name] += sent

    def size(self, group=None) -> int:
        return self.inner.size(group)

    def new_group(self, ranks):
        return self.inner.new_group(ranks)

    def all_to_all(self, recv, send, group=None) -> None:
        self._count("all_to_all", nbytes(send) - (nbytes(send[0]) if send.shape[0] else 0))
        self.inner.all_to_all(recv, send, group)

    def exchange(self, sends, recvs, group=None) -> list:
        self._count("exchange", sum(nbytes(t) for t, _ in sends))
        return self.inner.exchange(sends, recvs, group)

    def all_gather(self, parts, tensor, group=None) -> None:
        self._count("all_gather", (len(parts) - 1) * nbytes(tensor))
        self.inner.all_gather(parts, tensor, group)

    def broadcast(self, tensor, src: int = 0) -> None:
        self._count("broadcast", (self.size() - 1) * nbytes(tensor) if self.rank == src else 0)
        self.inner.broadcast(tensor, src)

    def broadcast_object(self, obj, src: int = 0):
        self._count("broadcast_object", 0)
        return self.inner.broadcast_object(obj, src)

    def send(self, tensor, dst: int) -> None:
        self._count("send", nbytes(tensor))
        self.inner.send(tensor, dst)

    def vote(self, flag: bool) -> bool:
        self._count("vote", 4)  # one int32 to the reduction
        return self.inner.vote(flag)

    def recv(self, tensor, src: int) -> None:
        self._count("recv", 0)
        self.inner.recv(tensor, src)
