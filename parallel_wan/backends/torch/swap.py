"""memory=swap on PyTorch: the low-noise expert waits in host memory and moves to the device
during the last high-noise step(s); the high-noise expert is freed as it finishes.

Two schedules. swap_prefetch_steps=0 (default): the last high-noise step exchanges the experts
block by block (runners/exchange.BlockExchange, that step's block runner) — each high-noise
block is dropped once it has run and the low-noise block of the same index is copied in, so the
device never holds two experts.
swap_prefetch_steps=n ≥ 1: the whole low-noise expert is copied from n steps before the
switch, beside the high-noise one.

The step plan says when (`pipeline.denoise.step_plan`: `Step.prefetch` on the step where the
copy starts, `Step.release` on the first step that no longer needs an expert); this file only
moves the bytes. On CUDA the host copy is pinned and the device copy runs on a side stream, so
it overlaps the high-noise steps' compute; the first low-noise step waits on its event. On CPU
"the device" is host memory too: the copy is a plain clone, which keeps the same schedule (and
its tests) meaningful.
"""

from __future__ import annotations

import torch

from ...weights.quantized.form import placed_dtype
from ...weights.tree import map_leaves
from .runners.exchange import BlockExchange


class HostExpert:
    """An expert's params tree kept in host memory (pinned on CUDA) until it is swapped in."""

    def __init__(self, tree: dict):
        self.tree = tree


def to_host(tree: dict, dtype: torch.dtype, keep_fp32) -> HostExpert:
    """The tree cast as the device copy will be, in host memory; pinned when CUDA exists so
    the later host→device copy is asynchronous (pageable memory would make it synchronous)."""
    pin = torch.cuda.is_available()

    def move(name, t):
        t = t.to(placed_dtype(name, t.dtype, dtype, keep_fp32))  # quantized bytes stay quantized
        t = t.contiguous()
        return t.pin_memory() if pin else t

    return HostExpert(map_leaves(move, tree))


class ExpertSwap:
    """Acts on the step plan's prefetch/release marks, editing `experts` (the task's dict:
    name → (config, params)) in place so the predictor always finds the current params.
    `events`: (step index, "prefetch" | "release" | "ready", expert), for logs and tests."""

    def __init__(self, experts: dict, device: torch.device):
        self.experts, self.device = experts, device
        self.events: list[tuple[int, str, str]] = []
        self._pending: dict[str, tuple[dict, object]] = {}  # expert → (device tree, copy-done event)
        self._exchange: BlockExchange | None = None

    def before_step(self, step) -> None:
        if self._exchange is not None:
            # The exchange step's forward closes its pass; a step that skipped the forward
            # altogether (a step cache) did not, so the exchange completes here.
            self._exchange.close()
            self._exchange = None
        if getattr(step, "exchange", None):
            self.exchange(step.index, step.expert, step.exchange)
        if getattr(step, "prefetch", None):
            self.prefetch(step.index, step.prefetch)
        if getattr(step, "release", None):
            self.release(step.index, step.release)
        self.ready(step.index, step.expert)

    def prefetch(self, index: int, name: str) -> None:
        cfg, params = self.experts[name]
        if not isinstance(params, HostExpert) or name in self._pending:
            return
        self.events.append((index, "prefetch", name))
        if self.device.type == "cuda":
            stream = torch.cuda.Stream(self.device)
            with torch.cuda.stream(stream):
                tree = map_leaves(lambda _, t: t.to(self.device, non_blocking=True), params.tree)
            done = torch.cuda.Event()
            done.record(stream)
        else:
            tree, done = map_leaves(lambda _, t: t.to(self.device, copy=True), params.tree), None
        self._pending[name] = (tree, done)

    def exchange(self, index: int, current: str, incoming: str) -> None:
        """This step is `current`'s last: its blocks become a BlockExchange, which the step's
        runner (runners.choice) runs: each block freed once it has run, `incoming`'s block of the
        same index copied into the memory just freed, `incoming`'s other weights last."""
        cfg, params = self.experts[current]
        _, host = self.experts[incoming]
        if not isinstance(host, HostExpert) or incoming in self._pending:
            return
        self.events.append((index, "exchange", incoming))

        def finished(tree, done):
            self._pending[incoming] = (tree, done)

        self._exchange = BlockExchange(list(params["blocks"]), host.tree, self.device, finished)
        self.experts[current] = (cfg, {**params, "blocks": self._exchange})  # the only holder of its blocks

    def ready(self, index: int, name: str) -> None:
        """Make sure `name` is on the device before its step (a copy the plan did not start
        early starts now, synchronously)."""
        _, params = self.experts[name]
        if not isinstance(params, HostExpert):
            return
        if name not in self._pending:
            self.prefetch(index, name)
        tree, done = self._pending.pop(name)
        if done is not None:
            main = torch.cuda.current_stream(self.device)
            main.wait_event(done)
            # The copies were allocated on the side stream; tell the allocator the main stream
            # uses them, or their blocks could be handed out again while still in use.
            map_leaves(lambda _, t: t.record_stream(main), tree)
        self.experts[name] = (self.experts[name][0], tree)  # the host copy is dropped here
        self.events.append((index, "ready", name))

    def release(self, index: int, name: str) -> None:
        """Drop every reference this run holds to the expert's device tensors."""
        cfg, _ = self.experts[name]
        self.experts[name] = (cfg, None)
        self.events.append((index, "release", name))
        if self.device.type == "cuda":
            torch.cuda.empty_cache()  # hand the freed blocks back, for the VAE decode after the loop
