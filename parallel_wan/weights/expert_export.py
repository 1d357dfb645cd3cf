"""One expert of a checkpoint written as a quantized single file (`python -m parallel_wan.quantize`),
in the layout `weights_high=` / `weights_low=` / `weights=` read back (weights/expert_file.py:
`lightx2v`): official Wan names, each block linear's weight int8 or float8_e4m3fn with a float32
`<layer>.weight_scale` of shape [out, 1], every other tensor as the checkpoint stores it.

The values are `quantize=`'s at load, exactly: `quantize_rows` on the stored weight widened to
float32 (one scale per output channel, absmax / 127 or / 448), so a run with the file holds the
same bytes in memory as a run with `quantize=` on the checkpoint, and renders the same video.

Streamed: the file's layout (header, every tensor's byte range) follows from the checkpoint's
headers alone, so the header is written first and each tensor is read, converted and written at
its own offset, one tensor at a time, in the checkpoint's file order. Memory holds one tensor
(a 14B expert's largest linear: 141 MB in bf16, plus its float32 widening while it is
quantized), never the expert; reads are plain reads, not a mapping, so the checkpoint's pages
do not pile up in this process. Tensors are laid out widest dtype first (float32 scales, then
16-bit tensors, then one-byte weights), so every tensor starts aligned to its item size, as
safetensors' own writer does. A NaN/±inf in any tensor stops the write (BadWeights), as it stops
`quantize=` at load.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .finite import non_finite, refuse
from .loader import expert_sources
from .quantized.form import KINDS, LIMIT, quantize_rows
from .quantized.names import quantizable
from .safetensors_header import STORED_ITEMSIZE, TensorInfo
from .safetensors_io import STORED_CODES
from .transformer_keymap import diffusers_to_official_name

SCALE = ".weight_scale"  # LightX2V's per-output-channel scale, [out, 1] float32
ALIGN = 8  # the header is padded to 8 bytes, as safetensors pads it


@dataclass(frozen=True)
class Entry:
    """One tensor of the file: its official name, stored dtype code and shape, where its data
    goes (offsets from the start of the data), and the checkpoint tensor it comes from."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    source: TensorInfo
    begin: int = 0
    end: int = 0


@dataclass(frozen=True)
class Plan:
    """An expert's file before it is written: every entry placed, the header bytes, the size."""

    expert: str
    entries: dict[str, Entry]  # official name → entry
    header: bytes  # the 8-byte length and the JSON (padded)
    quantized: int  # block linears stored one byte per weight

    @property
    def size(self) -> int:
        return len(self.header) + max((e.end for e in self.entries.values()), default=0)


def plan(checkpoint, expert: str, kind: str, metadata: dict[str, str]) -> Plan:
    """The file for `expert` of `checkpoint` (a weights.layout.Checkpoint) under quantize=`kind`;
    headers only. `metadata`: the header's `__metadata__` (strings)."""
    if kind not in KINDS:
        raise ValueError(f"quantize={kind!r}: choose one of {', '.join(KINDS)}")
    code = STORED_CODES[KINDS[kind]]
    entries, quantized = [], 0
    for name, info in expert_sources(checkpoint, expert).items():
        official = diffusers_to_official_name(name)
        if quantizable(name) and len(info.shape) == 2:
            entries.append(Entry(official, code, tuple(info.shape), info))
            entries.append(Entry(official.removesuffix(".weight") + SCALE, "F32", (info.shape[0], 1), info))
            quantized += 1
        else:
            entries.append(Entry(official, info.dtype, tuple(info.shape), info))
    entries.sort(key=lambda e: (-STORED_ITEMSIZE[e.dtype], e.name))  # widest first: each tensor aligned
    placed, offset = {}, 0
    for e in entries:
        size = math.prod(e.shape) * STORED_ITEMSIZE[e.dtype]
        placed[e.name] = Entry(e.name, e.dtype, e.shape, e.source, offset, offset + size)
        offset += size
    header = {"__metadata__": metadata}
    header.update(
        {e.name: {"dtype": e.dtype, "shape": list(e.shape), "data_offsets": [e.begin, e.end]} for e in placed.values()}
    )
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % ALIGN)
    return Plan(expert, placed, len(text).to_bytes(8, "little") + text, quantized)


def write(plan: Plan, kind: str, path: Path) -> None:
    """Write `plan`'s file at `path` (the caller's temporary name: it renames the whole file into
    place). Raises BadWeights for a non-finite tensor, OSError when the disk does."""
    by_source: dict[tuple[Path, int, str], list[Entry]] = {}
    for e in plan.entries.values():
        by_source.setdefault((e.source.file, e.source.start, e.source.name), []).append(e)
    data = len(plan.header)
    written = 0
    readers: dict[Path, object] = {}
    try:
        with open(path, "wb") as out:
            out.write(plan.header)
            for key in sorted(by_source):  # the checkpoint's file order: a cold disk streams
                targets = by_source[key]
                info = targets[0].source
                reader = readers.get(info.file) or readers.setdefault(info.file, open(info.file, "rb"))
                for e, values in _converted(_read(reader, info), targets, kind, info):
                    raw = values.contiguous().reshape(-1).view(torch.uint8).numpy()  # no copy (bf16 too)
                    if raw.nbytes != e.end - e.begin:
                        raise AssertionError(f"{e.name}: {raw.nbytes} bytes for a range of {e.end - e.begin}")
                    _pwrite_all(out.fileno(), memoryview(raw), data + e.begin)
                    written += raw.nbytes
            if written != plan.size - data:
                raise AssertionError(f"{written} bytes of tensor data written; the header promises {plan.size - data}")
            out.truncate(plan.size)
            out.flush()
            os.fsync(out.fileno())
    finally:
        for reader in readers.values():
            reader.close()


def _pwrite_all(fd: int, buffer: memoryview, offset: int) -> None:
    """os.pwrite until every byte is written (one call may write less: Linux caps it near 2 GiB)."""
    while len(buffer):
        done = os.pwrite(fd, buffer, offset)
        buffer, offset = buffer[done:], offset + done


def _read(reader, info: TensorInfo) -> torch.Tensor:
    """The stored tensor, read into memory this process owns (no mapping)."""
    count = math.prod(info.shape)
    buffer = bytearray(count * STORED_ITEMSIZE[info.dtype])
    reader.seek(info.start)
    if reader.readinto(buffer) != len(buffer):
        raise OSError(f"{info.file}: tensor {info.name} ends past the file's end; the file is truncated")
    if not count:
        return torch.empty(info.shape, dtype=info.torch_dtype)
    return torch.frombuffer(buffer, dtype=info.torch_dtype).view(info.shape)


def _converted(tensor: torch.Tensor, targets: list[Entry], kind: str, info: TensorInfo):
    """(entry, values) for each entry made from this stored tensor: itself as stored, or its
    quantized weight and scale."""
    if len(targets) == 1 and targets[0].dtype == info.dtype:
        bad = non_finite(tensor)
        if bad:
            raise refuse(str(info.file), info.name, bad, tensor.numel())
        yield targets[0], tensor
        return
    wide = tensor.to(torch.float32)
    bad = non_finite(wide)
    if bad:
        raise refuse(str(info.file), info.name, bad, wide.numel())
    q, scale = quantize_rows(wide, kind)
    del wide
    for e in targets:
        yield e, (scale if e.name.endswith(SCALE) else q)


def scale_rule(kind: str) -> str:
    """The metadata's words for the scales."""
    return (
        f"float32 [out, 1], one per output channel: absmax / {LIMIT[KINDS[kind]]:g}; "
        f"W = q · scale (parallel_wan.weights.quantized.form.quantize_rows, as quantize={kind} at load)"
    )
