"""Loader sources that are not one stored tensor as it lies: a quantized expert file's weight
kept as stored, its scale in the one in-memory form (float32 (rows, G); NVFP4: the packed
weight in our nibble order, its block scales unswizzled, its global scale per row), and a quantized tensor
outside the block linears widened as it loads (weights/expert_file.py makes them; the loader
copies them like any tensor, dim-0 rows included)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from parallel_wan.weights.quantized import nvfp4
from parallel_wan.weights.safetensors_io import MappedFile, TensorInfo

Rows = tuple[int, int] | None


@dataclass(frozen=True)
class Derived:
    """A loader source that is not one stored tensor as it lies: `make(mapped, rows)` builds
    the tensor (or its dim-0 rows) from the mapped file. `shape` is the whole tensor's, `dtype`
    the one it gets (None: the loader's policy, as for a stored tensor); `file`/`start` order
    the reads and `name` is what messages call it."""

    file: Path
    start: int
    shape: tuple[int, ...]
    dtype: torch.dtype | None
    name: str
    make: Callable[[MappedFile, Rows], torch.Tensor]


def stored(info: TensorInfo):
    return lambda mapped, rows: mapped.view(info, rows)


def scale_rows(scale, weight: TensorInfo):
    """The (rows, G) float32 scale of weight rows [b, e) in the one in-memory form; `scale` is
    the file's (an expert_file.Scale: its entry, layout and block) or None (float8, no scale)."""

    def make(mapped: MappedFile, rows: Rows) -> torch.Tensor:
        begin, end = rows if rows is not None else (0, weight.shape[0])
        if scale is None:  # float8 stored without a scale: W = q
            return torch.ones(end - begin, 1)
        values = mapped.view(scale.info)
        if scale.layout == "tensor":
            return values.reshape(1, 1).expand(end - begin, 1)
        if scale.layout == "rows":
            return values.reshape(-1, 1)[begin:end]
        return values[torch.arange(begin, end) // scale.block]  # each block's row of scales, repeated

    return make


def nvfp4_weight(info: TensorInfo, hi_first: bool):
    """An NVFP4 weight's packed rows in the form's nibble order (ComfyUI's files hold the other)."""

    def make(mapped: MappedFile, rows: Rows) -> torch.Tensor:
        packed = mapped.view(info, rows)
        return nvfp4.swap_nibbles(packed) if hi_first else packed

    return make


def nvfp4_blocks(scale, weight: TensorInfo):
    """An NVFP4 weight's e4m3 block scales (rows, in/16) in row order, from the file's swizzled
    table (only the 128-row tiles holding the rows asked for are read)."""

    def make(mapped: MappedFile, rows: Rows) -> torch.Tensor:
        begin, end = rows if rows is not None else (0, weight.shape[0])
        blocks = weight.shape[1] * 2 // nvfp4.BLOCK
        table = mapped.view(scale.info)
        return nvfp4.blocked_rows(table, weight.shape[0], blocks, begin, end).contiguous()

    return make


def nvfp4_global(scale, weight: TensorInfo):
    """An NVFP4 weight's float32 global scale expanded to its rows (rows, 1): the file's scalar,
    or the product of LightX2V's two (alpha · input_global_scale)."""

    def make(mapped: MappedFile, rows: Rows) -> torch.Tensor:
        begin, end = rows if rows is not None else (0, weight.shape[0])
        value = torch.ones(())
        for info in scale.globals:
            value = value * mapped.view(info).to(torch.float32).reshape(())
        return value.reshape(1, 1).expand(end - begin, 1)

    return make


def widened(info: TensorInfo, scale):
    """A quantized tensor outside the block linears: W = q · s in float32 (the copy casts it)."""

    def make(mapped: MappedFile, rows: Rows) -> torch.Tensor:
        if scale is not None and scale.layout == "nvfp4":
            return nvfp4.dequantize(
                nvfp4_weight(info, scale.hi_first)(mapped, rows),
                nvfp4_blocks(scale, info)(mapped, rows),
                nvfp4_global(scale, info)(mapped, rows),
            )
        q = mapped.view(info, rows).to(torch.float32)
        if scale is None:
            return q
        s = scale_rows(scale, info)(mapped, rows).to(torch.float32)
        if scale.layout == "blocks":
            s = s.repeat_interleave(scale.block, dim=1)
        return q * s.reshape(s.shape[0], s.shape[1], *([1] * (q.ndim - 2)))

    return make
