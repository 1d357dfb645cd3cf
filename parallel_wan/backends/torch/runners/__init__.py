"""Block runners: how the transformer's blocks run, handed to `models.transformer.forward` as
`run_blocks` (the protocol: block_pass.py). One per memory mode — resident, sharded (FSDP
gathers), exchange (memory=swap's last high-noise step) — compiled, which wraps any of
them, and cached (a step cache running a prefix of the stack); `choice.expert_runner` picks."""

from .block_pass import BlockPass, BlockRunner, ResidentRunner
from .cached import CachedRunner
from .choice import expert_runner
from .compiled import CompiledRunner, Compiler
from .exchange import BlockExchange, ExchangeRunner
from .sharded import ShardedRunner

__all__ = [
    "BlockExchange",
    "BlockPass",
    "BlockRunner",
    "CachedRunner",
    "CompiledRunner",
    "Compiler",
    "ExchangeRunner",
    "ResidentRunner",
    "ShardedRunner",
    "expert_runner",
]
