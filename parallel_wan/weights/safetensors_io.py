"""Reading weight files: safetensors (one file or shards with an index) and `.pth` pickles.

Every tensor is made exactly once in host memory: `safe_open(framework="pt")` hands out a
view of the memory-mapped file, and the one `.to(dtype)` (or `.clone()` when the dtype already
matches) is the copy. So a bf16 file read as bf16 is never widened to fp32 on the way, and an
fp32 file read as bf16 is never held in memory at full width.

Headers are readable on their own (`read_header`, `tensor_index`): names, dtypes and shapes
come from the JSON at the front of each file, so shape checks cost no tensor data.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

import torch
from safetensors import safe_open

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

KeepFp32 = Callable[[str], bool]
Rename = Callable[[str], str]


@dataclass(frozen=True)
class TensorInfo:
    file: Path
    dtype: str  # the safetensors code: "F32", "BF16", …
    shape: tuple[int, ...]


def torch_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not a weight dtype; use one of {sorted(DTYPES)}")
    return DTYPES[dtype]


def cast(tensor: torch.Tensor, name: str, dtype: torch.dtype | None, keep_fp32: KeepFp32 | None) -> torch.Tensor:
    """The single copy of a (possibly memory-mapped) tensor, in the dtype this name should have."""
    target = tensor.dtype if dtype is None else dtype
    if keep_fp32 is not None and tensor.is_floating_point() and keep_fp32(name):
        target = torch.float32
    if not tensor.is_floating_point():
        target = tensor.dtype
    if target == tensor.dtype:
        # clone, not the mapped view: the result must not pin (or die with) the file
        return tensor.clone(memory_format=torch.contiguous_format)
    return tensor.to(target, memory_format=torch.contiguous_format)


# ------------------------------------------------------------------------------ headers
def read_header(path: str | Path) -> dict[str, TensorInfo]:
    """Names, dtypes and shapes of one safetensors file, from its JSON header only."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
    except (OSError, struct.error, ValueError) as e:
        raise ValueError(f"{path}: not a readable safetensors file ({e})") from e
    header.pop("__metadata__", None)
    return {name: TensorInfo(path, entry["dtype"], tuple(entry["shape"])) for name, entry in header.items()}


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
        weight_map = json.loads(indexes[0].read_text())["weight_map"]
        files = {}
        for name, file in weight_map.items():
            path = source / file
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
    by_file: dict[Path, list[str]] = {}
    for name in files:
        if name in wanted:
            by_file.setdefault(files[name], []).append(name)
    out: dict[str, torch.Tensor] = {}
    for path, file_names in by_file.items():
        with safe_open(str(path), framework="pt") as f:
            for name in file_names:
                new_name = rename(name) if rename else name
                out[new_name] = cast(f.get_tensor(name), new_name, target, keep_fp32)
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
