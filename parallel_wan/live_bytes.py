"""The most bytes held at once by tensors that ops return, counted per storage.

A `TorchDispatchMode` sees every op's outputs; each new storage is counted until its last
tensor dies (a weak reference to the storage says when). Tensors made before the mode (weights,
inputs) are not counted, so around a forward it measures the activations. Works on the meta
device too, where nothing is allocated: the planner runs the model code on meta tensors of the
run's shapes and reads the peak its tensors would have held.
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
                if ref.cdata not in self.live:
                    self.live[ref.cdata] = (ref, storage.nbytes())
        self.peak = max(self.peak, self.now)
        return out
