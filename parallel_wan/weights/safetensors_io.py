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

import json
import math
import mmap
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

import torch

from parallel_wan.weights.copy_pool import Copy, copy_all, host_empty
from parallel_wan.weights.finite import copy_checked, refuse
from parallel_wan.weights.trust import listed_file

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

KeepFp32 = Callable[[str], bool]
Rename = Callable[[str], str]


# safetensors dtype codes; the format is little-endian, as is every host this runs on.
STORED_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
    # quantized experts (weights/expert_file.py); a float8 tensor elsewhere is widened as it is cast
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}
STORED_CODES = {dtype: code for code, dtype in STORED_DTYPES.items()}


@dataclass(frozen=True)
class TensorInfo:
    file: Path
    dtype: str  # the safetensors code: "F32", "BF16", …
    shape: tuple[int, ...]
    start: int = 0  # absolute byte range of the data in the file
    end: int = 0
    name: str = ""  # its name in the file (messages name it)

    @property
    def torch_dtype(self) -> torch.dtype:
        if self.dtype not in STORED_DTYPES:
            raise ValueError(f"{self.file}: dtype {self.dtype} is not a weight dtype this loader reads "
                             f"({', '.join(STORED_DTYPES)})")
        return STORED_DTYPES[self.dtype]


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


def cast(tensor: torch.Tensor, name: str, dtype: torch.dtype | None, keep_fp32: KeepFp32 | None,
         origin: str | Path | None = None) -> torch.Tensor:
    """The single copy of a (possibly memory-mapped) tensor, in the dtype this name should have
    (a new tensor: the result must not pin, or die with, the file), checked for NaN/inf in the
    same copy; `origin`, the file it came from, names it when it holds any."""
    out = torch.empty(tensor.shape, dtype=target_dtype(name, tensor.dtype, dtype, keep_fp32))
    bad = copy_checked(out, tensor)
    if bad:
        raise refuse(str(origin or "a weights file"), name, bad, out.numel())
    return out


# ------------------------------------------------------------------------------ headers
def read_header(path: str | Path) -> dict[str, TensorInfo]:
    """Names, dtypes, shapes and byte ranges of one safetensors file, from its JSON header only,
    each checked against the file's size (a file is untrusted input: see `parse_header`)."""
    raw = read_header_bytes(path)
    return parse_header(path, raw, file_size=os.path.getsize(path))[0]


def read_header_bytes(path: str | Path) -> bytes:
    """The 8-byte length and the JSON header of a safetensors file, as stored."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            prefix = f.read(8)
            (length,) = struct.unpack("<Q", prefix)
            if length > 100_000_000:  # the format's own limit; a bigger value is a corrupt file
                raise ValueError(f"header length {length} is implausible")
            if length > os.fstat(f.fileno()).st_size - 8:
                raise ValueError(f"its header length {length} runs past the end of the file; it is truncated")
            header = f.read(length)
    except (OSError, struct.error, ValueError) as e:
        raise ValueError(f"{path}: not a readable safetensors file ({e})") from e
    if len(header) != length:
        raise ValueError(f"{path}: not a readable safetensors file (header cut short at {len(header)} of {length} bytes)")
    return prefix + header


def parse_header(path: str | Path, raw: bytes, file_size: int | None = None) -> tuple[dict[str, TensorInfo], dict]:
    """(tensors, metadata) of a safetensors header; raises ValueError when it is malformed.

    Every entry is checked before anything is mapped: a known dtype, a shape of non-negative
    whole numbers, data offsets whose span is exactly the tensor's bytes and, given the file's
    size, that end inside the file — so a truncated or doctored file is refused by name here
    instead of mapping past its end (a crash) or reading another tensor's bytes (garbage)."""
    path = Path(path)
    base = len(raw)
    try:
        header = json.loads(raw[8:])
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
        metadata = header.pop("__metadata__", None) or {}
        infos = {}
        for name, entry in header.items():
            begin, end = entry["data_offsets"]
            infos[name] = TensorInfo(path, entry["dtype"], tuple(entry["shape"]), base + begin, base + end, name)
            _check_entry(infos[name], name, begin, end)
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a readable safetensors file ({e})") from e
    ends = [info.end for info in infos.values()]
    if file_size is not None and ends and max(ends) > file_size:
        name = max(infos, key=lambda n: infos[n].end)
        raise ValueError(f"{path}: truncated or corrupt: tensor {name} ends at byte {infos[name].end} but the file "
                         f"has {file_size} bytes; re-download that file")
    return infos, metadata


def _check_entry(info: TensorInfo, name: str, begin, end) -> None:
    if info.dtype not in STORED_DTYPES:
        raise ValueError(f"tensor {name} has dtype {info.dtype!r}, not one of {', '.join(STORED_DTYPES)}")
    if not all(type(n) is int and n >= 0 for n in (*info.shape, begin, end)) or begin > end:
        raise ValueError(f"tensor {name} has shape {list(info.shape)} and data offsets {[begin, end]}; "
                         "expected non-negative whole numbers with begin ≤ end")
    need = math.prod(info.shape) * STORED_DTYPES[info.dtype].itemsize
    if end - begin != need:
        raise ValueError(f"tensor {name} ({info.dtype} {list(info.shape)}) needs {need} bytes but its data offsets "
                         f"span {end - begin}")


def shard_files(source: str | Path) -> dict[str, Path]:
    """For a folder: tensor name → file, from the `*.safetensors.index.json` when there is one.

    For a single `.safetensors` file (or a folder holding exactly one and no index) every name
    maps to that file.
    """
    source = Path(source)
    if source.is_file():
        return {name: source for name in read_header(source)}
    if not source.is_dir():
        raise FileNotFoundError(f"{source}: no such safetensors file or folder")
    indexes = sorted(source.glob("*.safetensors.index.json"))
    if len(indexes) > 1:
        raise ValueError(f"{source}: more than one safetensors index ({', '.join(p.name for p in indexes)}); keep one")
    if indexes:
        try:
            weight_map = json.loads(indexes[0].read_text())["weight_map"]
            if not isinstance(weight_map, dict):
                raise TypeError("weight_map is not an object")
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{indexes[0]}: not a safetensors index ({e}); re-download it") from None
        files = {}
        for name, file in weight_map.items():
            path = listed_file(source, file, indexes[0].name)  # never outside `source`
            if not path.is_file():
                raise FileNotFoundError(f"{path}: listed in {indexes[0].name} but missing; re-download that shard")
            files[name] = path
        return files
    singles = sorted(source.glob("*.safetensors"))
    if len(singles) != 1:
        found = ", ".join(p.name for p in singles) or "none"
        raise FileNotFoundError(
            f"{source}: expected one *.safetensors file or a *.safetensors.index.json, found {found}"
        )
    return {name: singles[0] for name in read_header(singles[0])}


def tensor_index(source: str | Path) -> dict[str, TensorInfo]:
    """Every tensor of a folder (or file) with its file, dtype and shape; headers only."""
    files = shard_files(source)
    infos: dict[str, TensorInfo] = {}
    for path in sorted(set(files.values())):
        header = read_header(path)
        for name, info in header.items():
            if files.get(name) == path:
                infos[name] = info
    missing = sorted(set(files) - set(infos))
    if missing:
        raise ValueError(f"{source}: the index lists {missing[:3]} but their shard headers do not hold them")
    return infos


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
            raise ValueError(f"{self.path}: tensor data of {info.shape} {info.dtype} runs past its byte range; "
                             "the file is truncated or corrupt")
        if count == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(self._map, dtype=dtype, count=count, offset=start).view(shape)

    def prefetch(self, info: TensorInfo) -> None:
        """Ask the kernel to read a tensor's pages ahead (one large request instead of a page
        fault per 64 KiB), so a cold file streams at disk speed."""
        if hasattr(mmap, "MADV_WILLNEED") and info.end > info.start:
            page = mmap.PAGESIZE
            begin = info.start // page * page
            self._map.madvise(mmap.MADV_WILLNEED, begin, min(info.end, len(self._map)) - begin)


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


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
