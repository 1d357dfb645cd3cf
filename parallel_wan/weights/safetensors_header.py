"""safetensors headers without torch: names, dtypes, shapes and byte ranges from the JSON at
the front of each file, every entry checked against the file (a file is untrusted input).

Validation reads only these (a run's settings and its checkpoint are checked before anything
loads), so a bad checkpoint is refused before torch's 2 s of imports; `safetensors_io` maps and
reads the tensors and re-exports everything here.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from parallel_wan.weights.trust import allowed_roots, listed_file

# safetensors dtype codes → torch's dtype names and the bytes per value; the format is
# little-endian, as is every host this runs on. float8: quantized experts (weights/expert_file.py);
# a float8 tensor elsewhere is widened as it is cast.
STORED_NAMES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
}
STORED_ITEMSIZE = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}


@dataclass(frozen=True)
class TensorInfo:
    file: Path
    dtype: str  # the safetensors code: "F32", "BF16", …
    shape: tuple[int, ...]
    start: int = 0  # absolute byte range of the data in the file
    end: int = 0
    name: str = ""  # its name in the file (messages name it)

    @property
    def torch_dtype(self):
        import torch  # only where tensors are made

        if self.dtype not in STORED_NAMES:
            raise ValueError(
                f"{self.file}: dtype {self.dtype} is not a weight dtype this loader reads ({', '.join(STORED_NAMES)})"
            )
        return getattr(torch, STORED_NAMES[self.dtype])


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
        raise ValueError(
            f"{path}: not a readable safetensors file (header cut short at {len(header)} of {length} bytes)"
        )
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
        raise ValueError(
            f"{path}: truncated or corrupt: tensor {name} ends at byte {infos[name].end} but the file "
            f"has {file_size} bytes; re-download that file"
        )
    return infos, metadata


def _check_entry(info: TensorInfo, name: str, begin, end) -> None:
    if info.dtype not in STORED_ITEMSIZE:
        raise ValueError(f"tensor {name} has dtype {info.dtype!r}, not one of {', '.join(STORED_ITEMSIZE)}")
    if not all(type(n) is int and n >= 0 for n in (*info.shape, begin, end)) or begin > end:
        raise ValueError(
            f"tensor {name} has shape {list(info.shape)} and data offsets {[begin, end]}; "
            "expected non-negative whole numbers with begin ≤ end"
        )
    need = math.prod(info.shape) * STORED_ITEMSIZE[info.dtype]
    if end - begin != need:
        raise ValueError(
            f"tensor {name} ({info.dtype} {list(info.shape)}) needs {need} bytes but its data offsets "
            f"span {end - begin}"
        )


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
        # Each shard is checked once, at its first entry, though hundreds of names list it
        # (resolving symlinks per name was ~1/60 of the test suite's CPU).
        files, shards, roots = {}, {}, allowed_roots(source)
        for name, file in weight_map.items():
            path = shards.get(file) if isinstance(file, str) else None
            if path is None:
                path = listed_file(source, file, indexes[0].name, roots)  # never outside `source`
                if not path.is_file():
                    raise FileNotFoundError(f"{path}: listed in {indexes[0].name} but missing; re-download that shard")
                shards[file] = path
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
