"""The few collective operations the parallel code makes, as an interface it is handed.

Attention (Ulysses' all-to-all, the ring's point-to-point hops), the VAE decode (halo rows,
the keys and values of its attention, the bands sent to rank 0) and the run's exchanges (text
broadcast, dp exchange, token gather, the preemption vote) call these methods on an object they
are given, never a communication library directly. The run passes one over torch.distributed; the planner passes
one that sends nothing (so the real code runs on meta tensors), the benchmarks one that counts
the bytes sent, or one that loops each message back to its sender (one rank's compute on one
device). Implementations: backends/torch/collectives.py.

Tensors are the backend's; `group` is whatever the implementation's `new_group` returned (None:
every rank of the job). Ranks are global ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class Pending(Protocol):
    def wait(self) -> Any: ...


class Collectives(Protocol):
    rank: int  # this process's global rank

    def size(self, group=None) -> int:
        """Ranks in `group` (None: the job)."""

    def new_group(self, ranks: Sequence[int]):
        """A group of `ranks`; every rank of the job calls it for every group, in one order."""

    def all_to_all(self, recv, send, group=None) -> None:
        """send's dim 0 runs over the group's ranks: rank j gets send[j]; recv[j] is rank j's."""

    def exchange(self, sends: Sequence[tuple[Any, int]], recvs: Sequence[tuple[Any, int]], group=None) -> list[Pending]:
        """Start point-to-point transfers, (tensor, peer) each, as one batch; the caller waits on
        the returned handles after the compute they overlap."""

    def all_gather(self, parts: list, tensor, group=None) -> None:
        """parts[j] ← rank j's `tensor` (every rank's the same shape)."""

    def broadcast(self, tensor, src: int = 0) -> None:
        """Every rank's `tensor` ← rank src's."""

    def broadcast_object(self, obj, src: int = 0):
        """Rank src's picklable `obj`, on every rank."""

    def send(self, tensor, dst: int) -> None: ...

    def recv(self, tensor, src: int) -> None: ...

    def vote(self, flag: bool) -> bool:
        """True on every rank of the job when `flag` is true on any (the preemption vote: one
        small host-side reduction, no device sync); every rank calls it at the same point."""
