"""Reading weight files: safetensors (one file or shards with an index) and `.pth` pickles.

Every tensor is made exactly once in host memory. `MappedFile` maps a safetensors file and
hands out zero-copy views of its bytes (a bf16 tensor is viewed as bf16, never converted on
the way), and the one copy into the destination buffer does the dtype cast
(`copy_pool.copy_all`, many tensors at once). So a bf16 file read as bf16 is never widened to
fp32, and an fp32 file read as bf16 is never held in memory at full width. A view can cover
a run of dim-0 rows only: those rows are one contiguous byte range of the file, so a rank
that keeps a shard reads only the pages holding its shard.

Headers are readable on their own (`read_header`, `tensor_index`): names, dtypes and shapes
come from the JSON at the front of each file, so shape checks cost no tensor data.
"""

from __future__ import annotations

import math
import mmap
import struct
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import torch

from parallel_wan.weights.copy_pool import Copy, copy_all, host_empty
from parallel_wan.weights.finite import copy_checked, refuse
from parallel_wan.weights.safetensors_header import (  # noqa: F401 (re-exported: the readers' API)
    STORED_NAMES,
    TensorInfo,
    parse_header,
    read_header,
    read_header_bytes,
    shard_files,
    tensor_index,
)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

KeepFp32 = Callable[[str], bool]
Rename = Callable[[str], str]


STORED_DTYPES = {code: getattr(torch, name) for code, name in STORED_NAMES.items()}  # code → torch dtype
STORED_CODES = {dtype: code for code, dtype in STORED_DTYPES.items()}


def target_dtype(name: str, stored: torch.dtype, dtype: torch.dtype | None, keep_fp32: KeepFp32 | None) -> torch.dtype:
    """The dtype tensor `name` gets: `dtype`, float32 where keep_fp32(name), non-floats as stored."""
    if not stored.is_floating_point:
        return stored
    if keep_fp32 is not None and keep_fp32(name):
        return torch.float32
    return stored if dtype is None else dtype


def chunk_rows(rows: int, index: int, count: int) -> tuple[int, int]:
    """Rows [begin, end) of chunk `index` of `count` along dim 0, as `torch.chunk` cuts them
    (chunks of ceil(rows / count), the last ones short or empty) — what FSDP2's Shard(0) keeps."""
    if not (isinstance(index, int) and isinstance(count, int) and count >= 1 and 0 <= index < count):
        raise ValueError(f"shard=({index!r}, {count!r}) must be (index, count) with 0 ≤ index < count")
    size = -(-rows // count)
    return min(index * size, rows), min((index + 1) * size, rows)


def torch_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not a weight dtype; use one of {sorted(DTYPES)}")
    return DTYPES[dtype]


def cast(
    tensor: torch.Tensor,
    name: str,
    dtype: torch.dtype | None,
    keep_fp32: KeepFp32 | None,
    origin: str | Path | None = None,
) -> torch.Tensor:
    """The single copy of a (possibly memory-mapped) tensor, in the dtype this name should have
    (a new tensor: the result must not pin, or die with, the file), checked for NaN/inf in the
    same copy; `origin`, the file it came from, names it when it holds any."""
    out = torch.empty(tensor.shape, dtype=target_dtype(name, tensor.dtype, dtype, keep_fp32))
    bad = copy_checked(out, tensor)
    if bad:
        raise refuse(str(origin or "a weights file"), name, bad, out.numel())
    return out


# ------------------------------------------------------------------------------ mapping
class MappedFile:
    """A safetensors file mapped into memory; `view` gives tensors over its pages, no copy.

    The mapping is private (copy-on-write), so views are writable tensors without warnings and
    no write could ever reach the file. It stays mapped while any view of it is alive.
    """

    def __init__(self, path: str | Path):
        if sys.byteorder != "little":
            raise RuntimeError("safetensors files are little-endian; this loader runs on little-endian hosts only")
        self.path = Path(path)
        self.infos = read_header(self.path)
        with open(self.path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE)

    @property
    def size(self) -> int:
        return len(self._map)

    def view(self, info: TensorInfo, rows: tuple[int, int] | None = None) -> torch.Tensor:
        """Tensor `info` (or its dim-0 rows [begin, end)) over the mapped bytes, in the stored dtype."""
        dtype = info.torch_dtype
        shape = list(info.shape)
        start = info.start
        if rows is not None and shape:
            row_bytes = math.prod(shape[1:]) * _itemsize(dtype)
            start += rows[0] * row_bytes
            shape[0] = rows[1] - rows[0]
        count = math.prod(shape)
        if start + count * _itemsize(dtype) > min(info.end, len(self._map)):
            raise ValueError(
                f"{self.path}: tensor data of {info.shape} {info.dtype} runs past its byte range; "
                "the file is truncated or corrupt"
            )
        if count == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(self._map, dtype=dtype, count=count, offset=start).view(shape)

    def number(self, info: TensorInfo) -> float | None:
        """A one-value tensor's value decoded from its bytes (no tensor made: under the fake-GPU
        harness's fake mode reading a tensor's value is an op), or None for a dtype not decoded
        here or a tensor of another size."""
        formats = {"F64": "<d", "F32": "<f", "F16": "<e", "BF16": "bf16"}
        if info.dtype not in formats or math.prod(info.shape) != 1:
            return None
        size = 2 if info.dtype == "BF16" else struct.calcsize(formats[info.dtype])
        if info.start + size > min(info.end, len(self._map)):
            return None  # truncated: the tensor read names the problem
        raw = self._map[info.start : info.start + size]
        if info.dtype == "BF16":  # bfloat16 is float32's upper half
            return struct.unpack("<f", b"\0\0" + raw)[0]
        return struct.unpack(formats[info.dtype], raw)[0]

    def prefetch(self, info: TensorInfo) -> None:
        """Ask the kernel to read a tensor's pages ahead (one large request instead of a page
        fault per 64 KiB), so a cold file streams at disk speed."""
        if hasattr(mmap, "MADV_WILLNEED") and info.end > info.start:
            page = mmap.PAGESIZE
            begin = info.start // page * page
            self._map.madvise(mmap.MADV_WILLNEED, begin, min(info.end, len(self._map)) - begin)


def _itemsize(dtype: torch.dtype) -> int:
    return dtype.itemsize  # a property of the dtype: no tensor made (under a fake mode that is an op)


def map_files(paths) -> dict[Path, MappedFile]:
    return {Path(p): MappedFile(p) for p in sorted(set(paths))}


def copy_from(mapped: MappedFile, info: TensorInfo, rows: tuple[int, int] | None = None):
    """A source for `copy_pool.copy_all`: the view is made in the worker, just before its copy."""

    def source() -> torch.Tensor:
        if rows is None:
            mapped.prefetch(info)
        return mapped.view(info, rows)

    return source


# ------------------------------------------------------------------------------ reading
def read_safetensors(
    source: str | Path,
    dtype: str | torch.dtype | None = None,
    keep_fp32: KeepFp32 | None = None,
    rename: Rename | None = None,
    names: Iterable[str] | None = None,
) -> dict[str, torch.Tensor]:
    """Tensors of a safetensors folder or file, cast to `dtype` in their one copy.

    rename maps each stored name to the name returned (and the one keep_fp32 is asked about),
    so an official-layout file comes back under diffusers names in the same pass.
    names limits the read to those stored names.
    """
    target = torch_dtype(dtype)
    files = shard_files(source)
    wanted = set(files) if names is None else set(names)
    unknown = wanted - set(files)
    if unknown:
        raise KeyError(f"{source}: no tensors named {sorted(unknown)[:5]}")
    mapped = map_files(files[name] for name in wanted)
    out: dict[str, torch.Tensor] = {}
    copies: list[Copy] = []
    for name in (n for n in files if n in wanted):  # the index's order, as before
        info = mapped[files[name]].infos.get(name)
        if info is None:
            raise ValueError(f"{source}: the index lists {name} in {files[name].name} but that file does not hold it")
        new_name = rename(name) if rename else name
        out[new_name] = host_empty(info.shape, target_dtype(new_name, info.torch_dtype, target, keep_fp32))
        copies.append((info.file, info.start, out[new_name], copy_from(mapped[files[name]], info), name))
    copies.sort(key=lambda c: (c[0], c[1]))  # in file order: a cold disk streams
    copy_all((destination, source, (str(file), name)) for file, _, destination, source, name in copies)
    return out


def load_pth_mapped(path: str | Path) -> Mapping[str, torch.Tensor]:
    """The state dict of a `.pth` as memory-mapped tensors (no data read; shapes are free)."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # torch raises several types for corrupt or legacy files
        raise ValueError(f"{path}: cannot be read as a weights-only torch zip file ({e})") from e
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{path}: expected a flat dict of tensors (a state dict)")
    return state
