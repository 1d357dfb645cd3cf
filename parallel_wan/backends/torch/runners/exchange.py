"""memory=swap's exchange step: the last step of the outgoing (high-noise) expert runs its
blocks through a BlockExchange, which drops each outgoing block once it has run and copies the
incoming (low-noise) expert's block of the same index into the memory just freed. The device
holds one expert plus the block in use and the block in flight, never two experts.

Closing the exchange completes it whatever prefix ran (a step cache may stop after block 0, or
run none): every outgoing block still held is dropped and every incoming block not yet copied is
copied, then the incoming expert's other weights; `finished(tree, event)` then hands the
incoming tree over. So a stopped step still ends with the low-noise expert whole on the device
and the high-noise one freed.

CUDA: each incoming block is allocated on the compute stream (so it can take the memory the
finished blocks gave back) and filled on a side stream that first waits for the compute queued
so far; the copies overlap the remaining blocks' compute. The event given to `finished` is what
the first step of the incoming expert waits on. On CPU the copy is a plain clone.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ....weights.tree import iter_leaves, map_leaves
from .block_pass import BlockPass, BlockRunner


class BlockExchange(BlockPass):
    """The exchange as a pass over the outgoing blocks; single use (one forward).
    `outgoing`: the only list holding the outgoing expert's blocks (this object empties it).
    `incoming`: the incoming expert's tree in host memory."""

    def __init__(self, outgoing: list, incoming: dict, device: torch.device, finished: Callable[[dict, object], None]):
        super().__init__(len(outgoing))
        self.outgoing, self.incoming, self.device, self.finished = outgoing, incoming, device, finished
        self.copied: list = []
        self.opened = False
        self.side = torch.cuda.Stream(device) if device.type == "cuda" else None

    def _take(self, i: int):
        block, self.outgoing[i] = self.outgoing[i], None
        return block

    def _after(self, i: int) -> None:
        # block i has run and only the caller's frame held it: copy its successor in
        self.copied.append(self._copy(self.incoming["blocks"][i], f"blocks.{i}"))

    def _close(self) -> None:
        for i in range(len(self.copied), self.count):  # the blocks a stopped step did not run
            self.outgoing[i] = None
            self.copied.append(self._copy(self.incoming["blocks"][i], f"blocks.{i}"))
        rest = {k: v for k, v in self.incoming.items() if k != "blocks"}
        tree = {**self._copy(rest, ""), "blocks": self.copied}
        done = None
        if self.side is not None:
            done = torch.cuda.Event()
            done.record(self.side)
        self.finished(tree, done)

    def _copy(self, tree, prefix: str):
        if self.side is None:
            return map_leaves(lambda _, t: t.to(self.device, copy=True), tree, prefix)
        main = torch.cuda.current_stream(self.device)
        queued = torch.cuda.Event()
        queued.record(main)
        out = map_leaves(lambda _, t: torch.empty_like(t, device=self.device), tree, prefix)
        self.side.wait_event(queued)
        with torch.cuda.stream(self.side):
            for (_, dst), (_, src) in zip(iter_leaves(out), iter_leaves(tree)):
                dst.copy_(src, non_blocking=True)
                dst.record_stream(self.side)
        return out


class ExchangeRunner(BlockRunner):
    """Runs the exchange step: the outgoing expert's `params["blocks"]` is its BlockExchange."""

    def open(self, exchange: BlockExchange) -> BlockPass:
        if exchange.opened:
            raise RuntimeError("the expert exchange runs in one forward; this step's forward already ran it")
        exchange.opened = True
        return exchange
