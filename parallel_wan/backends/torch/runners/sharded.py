"""memory=sharded's block runner: each block's weights are gathered from every rank's dim-0
chunk just before it runs and freed right after (the holders are FSDP2 modules, fsdp.py).

The schedule is FSDP2's explicit API, called from this loop: `unshard(async_op=True)` starts
block i+1's all-gather while block i computes; `reshard()` frees block i once it has run. At
most two blocks are whole at a time. Closing the pass waits for a prefetched gather nobody
will use (a step cache stopped before its block) and reshards it: leaving it pending would
leave a collective in flight on FSDP's group and a whole block alive until the next forward,
which would then find that block already unsharding.

Every rank must run the same prefix — the step cache decides on the host from values that are
identical on every rank — or the ranks' all-gathers stop matching.
"""

from __future__ import annotations

from .block_pass import BlockPass, BlockRunner


class ShardedPass(BlockPass):
    def __init__(self, holders: list):
        super().__init__(len(holders))
        self.holders = holders
        self._gathering: tuple[int, object] | None = None  # (block index, FSDP unshard handle)

    def _gather(self, i: int) -> None:
        self._gathering = (i, self.holders[i].unshard(async_op=True))

    def _take(self, i: int):
        if self._gathering is None:  # the pass's first block: nothing was prefetched
            self._gather(i)
        index, handle = self._gathering
        assert index == i, (index, i)  # blocks run in order, so the prefetched block is the next one
        handle.wait()
        self._gathering = None
        if i + 1 < self.count:
            self._gather(i + 1)  # overlaps block i's compute
        return self.holders[i].params()

    def _after(self, i: int) -> None:
        self.holders[i].reshard()

    def _close(self) -> None:
        if self._gathering is not None:
            index, handle = self._gathering
            self._gathering = None
            handle.wait()
            self.holders[index].reshard()


class ShardedRunner(BlockRunner):
    """Runs a list of fsdp.ParamHolder, one per block (`fsdp.ShardedExpert.params()["blocks"]`)."""

    def open(self, holders: list) -> BlockPass:
        return ShardedPass(holders)
