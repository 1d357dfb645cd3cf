"""The block runner protocol (backends/torch/runners): a pass runs blocks [0, i), then goes on or
stops; closing finishes the runner's pending work; blocks run once, in order. The memory modes'
own guarantees under early stops are in tests/parallel/test_memory_modes.py (FSDP gathers on gloo ranks,
the expert exchange end to end)."""

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from parallel_wan.backends.torch.runners import BlockExchange, CompiledRunner, Compiler, ExchangeRunner, ResidentRunner


def add_block(h, weights):
    return h * 1.5 + weights["w"]


def blocks(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [{"w": torch.randn(4, generator=g)} for _ in range(n)]


def whole_stack(layers, h):
    for weights in layers:
        h = add_block(h, weights)
    return h


def test_a_pass_runs_a_prefix_then_goes_on_or_stops():
    layers, x = blocks(4), torch.ones(4)
    assert torch.equal(ResidentRunner()(add_block, x, layers), whole_stack(layers, x))
    with ResidentRunner().open(layers) as blocks_pass:
        h = blocks_pass.run(add_block, x, stop=1)
        assert blocks_pass.done == 1 and torch.equal(h, whole_stack(layers[:1], x))
        h = blocks_pass.run(add_block, h, stop=1)  # an empty range is allowed: nothing runs
        h = blocks_pass.run(add_block, h)
        assert blocks_pass.done == 4 and torch.equal(h, whole_stack(layers, x))
    with ResidentRunner().open(layers) as blocks_pass:
        blocks_pass.run(add_block, x, stop=2)
        with pytest.raises(ValueError, match=r"stop=1 is outside \[2, 4\]"):
            blocks_pass.run(add_block, x, stop=1)  # blocks run once, in order
        with pytest.raises(ValueError, match=r"stop=5 is outside \[2, 4\]"):
            blocks_pass.run(add_block, x, stop=5)
    with pytest.raises(RuntimeError, match="closed"):
        blocks_pass.run(add_block, x)


@pytest.mark.parametrize("stop", [0, 2, 3])
def test_compiled_exchange_stopped_early_still_completes_the_exchange(stop):
    """compile=true wraps the memory mode's runner: the compiled block function runs the prefix
    through the exchange's own pass, and closing it completes the exchange."""
    outgoing, incoming = blocks(3, seed=1), {"blocks": blocks(3, seed=2), "head": {"w": torch.randn(2)}}
    finished = []
    exchange = BlockExchange(list(outgoing), incoming, torch.device("cpu"), lambda tree, done: finished.append(tree))
    expected = whole_stack(outgoing[:stop], torch.ones(4))
    del outgoing
    runner = CompiledRunner(ExchangeRunner(), Compiler(backend="aot_eager"))
    torch._dynamo.reset()
    counters.clear()
    with runner.open(exchange) as blocks_pass:
        h = blocks_pass.run(add_block, torch.ones(4), stop=stop)
        assert len(exchange.copied) == stop and not finished  # in flight: only the blocks that ran are exchanged
    assert torch.equal(h, expected)  # the captured graph runs the same two ATen ops
    assert counters["stats"]["unique_graphs"] == (1 if stop else 0)  # compiled once, not per block
    assert exchange.outgoing == [None] * 3 and len(finished) == 1
    tree = finished[0]
    assert all(torch.equal(a["w"], b["w"]) for a, b in zip(tree["blocks"], incoming["blocks"], strict=True))
    assert torch.equal(tree["head"]["w"], incoming["head"]["w"])
    with pytest.raises(RuntimeError, match="already ran"):
        ExchangeRunner().open(exchange)  # one forward per exchange
