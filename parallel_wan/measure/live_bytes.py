"""The most bytes held at once by tensors that ops return, counted per storage.

A `TorchDispatchMode` sees every op's outputs; each new storage is counted until its last
tensor dies (a weak reference to the storage says when). Tensors made before the mode (weights,
inputs, state kept from earlier steps) are not counted: `held_bytes` counts those. So around a
phase, `held_bytes(what exists before) + live.peak` is the phase's peak of tensor memory.

What this counts, exactly (the planner, `parallel_wan.plan`, counts the same things):
- every storage an op returns (views share their base's storage and are counted once);
- at op boundaries only: a kernel's private scratch (CPU flash attention's per-thread
  buffers, a convolution's im2col or cuDNN workspace, the caching allocator's rounding and
  fragmentation) is never an op output, so it is in neither figure.

Works on the meta device too, where nothing is allocated: the planner runs the model code on
meta tensors of the run's shapes and reads the peak its tensors would have held.
"""

from __future__ import annotations

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class LiveBytes(TorchDispatchMode):
    """`with LiveBytes() as live: …` then `live.peak` (bytes), `live.now`."""

    def __init__(self):
        super().__init__()
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.peak = 0

    @property
    def now(self) -> int:
        self.live = {k: v for k, v in self.live.items() if not v[0].expired()}
        return sum(n for _, n in self.live.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                ref = StorageWeakRef(storage)
                known = self.live.get(ref.cdata)
                # A dead storage's address may be reused by a new one: count the new one.
                if known is None or known[0].expired():
                    self.live[ref.cdata] = (ref, storage.nbytes())
        self.peak = max(self.peak, self.now)
        return out


def held_bytes(*trees) -> int:
    """Bytes of the distinct storages of every tensor in `trees` (nested dicts, lists, tuples,
    or objects' `__dict__` are not walked): what a phase holds from before it starts."""
    seen: dict[int, int] = {}

    def walk(node):
        if isinstance(node, torch.Tensor):
            storage = node.untyped_storage()
            seen[StorageWeakRef(storage).cdata] = storage.nbytes()
        elif isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, (list, tuple)):
            for v in node:
                walk(v)

    for tree in trees:
        walk(tree)
    return sum(seen.values())
