"""A `.pth` state dict read as the loader reads one (weights/safetensors_io.py): mapped without
code execution, one cast copy per tensor. The loader reads an official checkpoint's `.pth` files
tensor by tensor; the tests read a whole file to compare it with its safetensors twin."""

from __future__ import annotations

from pathlib import Path

import torch

from parallel_wan.weights.safetensors_io import KeepFp32, Rename, cast, load_pth_mapped, torch_dtype


def read_pth(
    path: str | Path,
    dtype: str | torch.dtype | None = None,
    keep_fp32: KeepFp32 | None = None,
    rename: Rename | None = None,
) -> dict[str, torch.Tensor]:
    """A `.pth` state dict: unpickled without code execution, tensors memory-mapped, one cast copy."""
    target = torch_dtype(dtype)
    out: dict[str, torch.Tensor] = {}
    for name, tensor in load_pth_mapped(path).items():
        new_name = rename(name) if rename else name
        out[new_name] = cast(tensor, new_name, target, keep_fp32)
    return out
