"""The PyTorch backend as the orchestrator sees it: device choice, parameter placement with
the dtype policy, the attention callable and host↔device moves."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ...weights.tree import map_leaves
from . import ops


def pick_device(setting: str) -> torch.device:
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(setting)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={setting} but this machine has no CUDA device; use device=cpu or device=auto")
    return device


class TorchBackend:
    name = "torch"

    def __init__(self, device: str = "auto"):
        self.device = pick_device(device)
        self.ops = ops
        ops.set_default_device(self.device)
        # The one-device path: plain attention. Sequence-parallel meshes swap in their own.
        self.self_attention: Callable = ops.attention

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def place(self, tree, dtype: str, keep_fp32: Callable[[str], bool] | None = None):
        """Move a param tree to the device, casting to `dtype` except where `keep_fp32(name)`."""
        target = ops.dtype(dtype)

        def move(name, t):
            if not t.is_floating_point():
                return t.to(self.device)
            want = torch.float32 if keep_fp32 is not None and keep_fp32(name) else target
            return t.to(device=self.device, dtype=want)

        return map_leaves(move, tree)

    def to_device(self, array: np.ndarray | torch.Tensor, dtype: str | None = None) -> torch.Tensor:
        t = torch.as_tensor(array).to(self.device)
        return t.to(ops.dtype(dtype)) if dtype else t

    def to_host(self, x: torch.Tensor) -> np.ndarray:
        return ops.to_numpy(x)

    def inference_mode(self):
        return torch.inference_mode()
