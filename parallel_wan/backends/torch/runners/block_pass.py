"""The block runner protocol, and the resident runner.

`models.transformer.forward(..., run_blocks=runner)` calls `runner(block, x, blocks)`; a
runner runs the whole stack as one *pass*:

    with runner.open(blocks) as blocks_pass:     # nothing is gathered or copied yet
        h = blocks_pass.run(block, x, stop=i)    # blocks [0, i)
        h = blocks_pass.run(block, h)            # … and, or not, [i, n)
    # leaving the `with` closes the pass: its pending work is finished or cancelled

A step cache runs a prefix and may stop there (First-Block Cache: block 0, then maybe no
more; MagCache: no block at all), so stopping is part of the protocol, not an exception:
`close()` leaves no prefetched all-gather pending and no expert exchange half done, whatever
prefix ran. The per-block work (a gather, a copy) happens in explicit calls of the pass's loop,
never as a side effect of iterating a weights container.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable


class BlockPass(ABC):
    """One pass over `count` blocks; `done` of them have run. Subclasses say how block i's
    weights are had (`_take`), what follows its run (`_after`) and what closing finishes
    (`_close`)."""

    def __init__(self, count: int):
        self.count, self.done, self.closed = count, 0, False

    def run(self, block: Callable, h, stop: int | None = None):
        """Run blocks [done, stop) (stop=None: to the end) on h; returns the new h."""
        stop = self.count if stop is None else stop
        if self.closed:
            raise RuntimeError("this block pass is closed; open a new one")
        if not self.done <= stop <= self.count:
            raise ValueError(f"stop={stop} is outside [{self.done}, {self.count}]: blocks run once, in order")
        while self.done < stop:
            i = self.done
            weights = self._take(i)
            h = block(h, weights)
            del weights  # the block has run: nothing here keeps its weights alive
            self.done = i + 1
            self._after(i)
        return h

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ for subclasses
    @abstractmethod
    def _take(self, i: int):
        """Block i's weights, whole on the device."""

    def _after(self, i: int) -> None:
        pass

    def _close(self) -> None:
        pass


class BlockRunner(ABC):
    """`run_blocks` for the model's forward: open a pass, run every block, close it."""

    @abstractmethod
    def open(self, blocks) -> BlockPass:
        """A pass over `blocks` (what the placement put under params["blocks"])."""

    def __call__(self, block: Callable, x, blocks):
        with self.open(blocks) as blocks_pass:
            return blocks_pass.run(block, x)


class ResidentPass(BlockPass):
    def __init__(self, blocks: list):
        super().__init__(len(blocks))
        self.blocks = blocks

    def _take(self, i: int):
        return self.blocks[i]


class ResidentRunner(BlockRunner):
    """memory=resident (and memory=swap outside its exchange step): a list of per-layer param
    trees, all on the device; nothing to fetch or free."""

    def open(self, blocks: list) -> BlockPass:
        return ResidentPass(blocks)
