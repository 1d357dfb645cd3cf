"""The one place a block runner is chosen: from how an expert was placed (which is what the
memory mode decided, per expert: pipeline.checkpoint.placement) and the compile flag."""

from __future__ import annotations

from ..fsdp import ShardedExpert
from .block_pass import BlockRunner, ResidentRunner
from .compiled import CompiledRunner, Compiler
from .exchange import BlockExchange, ExchangeRunner
from .sharded import ShardedRunner


def expert_runner(name: str, placed, compiler: Compiler | None = None) -> tuple[dict, BlockRunner]:
    """(params for `models.transformer.forward`, its `run_blocks`) for expert `name` as placed now:

      memory=sharded       an fsdp.ShardedExpert: the non-block weights whole (gathered on first
                           use), the blocks' FSDP holders, gathered one at a time (ShardedRunner)
      memory=swap, the     a tree whose blocks are swap.ExpertSwap's BlockExchange
      exchange step        (ExchangeRunner)
      memory=resident, and a tree of device tensors (ResidentRunner)
      swap's other steps

    compiler (compile=true): the block function is compiled, whichever runner runs it."""
    if isinstance(placed, ShardedExpert):
        params, runner = placed.params(), ShardedRunner()
    elif isinstance(placed, dict):
        params = placed
        runner = ExchangeRunner() if isinstance(placed["blocks"], BlockExchange) else ResidentRunner()
    else:
        raise RuntimeError(
            f"the {name} expert is not on the device at this step (it is {type(placed).__name__}); "
            "the step plan's prefetch/release marks are out of order"
        )
    if compiler is not None:
        runner = CompiledRunner(runner, compiler)
    return params, runner
