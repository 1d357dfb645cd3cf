"""A step cache as a caller of the block pass: the cache (caching/host_cache.py) decides how
much of the stack runs — all of it, block 0 only (First-Block Cache skipping), or none
(MagCache reusing its residual) — and the memory mode's runner underneath (resident, FSDP
gathers, the swap exchange, compiled) closes its pass whatever prefix ran: no prefetched
all-gather is left pending, and a skipped exchange step still ends with the incoming expert
whole on the device."""

from __future__ import annotations

from collections.abc import Callable

from .block_pass import BlockPass, BlockRunner


class CachedRunner(BlockRunner):
    def __init__(self, inner: BlockRunner, cache):
        self.inner, self.cache = inner, cache

    def open(self, blocks) -> BlockPass:
        return self.inner.open(blocks)

    def __call__(self, block: Callable, x, blocks):
        with self.inner.open(blocks) as blocks_pass:
            return self.cache.run_stack(blocks_pass, block, x)
