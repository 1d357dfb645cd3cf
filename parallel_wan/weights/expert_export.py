"""One expert of a checkpoint written as a quantized single file (`python -m parallel_wan.quantize`),
in the layout `weights_high=` / `weights_low=` / `weights=` read back (weights/expert_file.py:
`lightx2v`): official Wan names, each block linear's weight int8 or float8_e4m3fn with a float32
`<layer>.weight_scale` of shape [out, 1], every other tensor as the checkpoint stores it.

nvfp4 is written in ComfyUI's format (so ComfyUI loads the file too; expert_file.py reads it
back): uint8 `<layer>.weight` (out, in/2) with element 2j in the high nibble, float8_e4m3fn
`<layer>.weight_scale` in cuBLAS's swizzled 128x4 layout, a float32 scalar
`<layer>.weight_scale_2` = absmax / (6 · 448) over the whole tensor (ComfyUI takes one per
tensor; quantize=nvfp4 at load takes one per row, so the two differ in their roundings), a
`<layer>.comfy_quant` tag and the header's `_quantization_metadata`.

The fp8/int8 values are `quantize=`'s at load, exactly: `quantize_rows` on the stored weight widened to
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

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .finite import non_finite, refuse
from .loader import expert_sources
from .quantized import nvfp4
from .quantized.form import KINDS, LIMIT, quantize_rows
from .quantized.names import quantizable
from .quantized.scales import absmax_steps
from .safetensors_header import STORED_ITEMSIZE, TensorInfo
from .safetensors_io import STORED_CODES
from .transformer_keymap import diffusers_to_official_name

SCALE = ".weight_scale"  # LightX2V's per-output-channel scale, [out, 1] float32
ALIGN = 8  # the header is padded to 8 bytes, as safetensors pads it
COMFY_TAG = json.dumps({"format": "nvfp4"}).encode()  # each NVFP4 layer's `comfy_quant` tensor (U8)


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
    role: str = "weight"  # what of the converted source it holds: weight | scale | global | tag


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
    entries, quantized, layers = [], 0, {}
    for name, info in expert_sources(checkpoint, expert).items():
        official = diffusers_to_official_name(name)
        layer = official.removesuffix(".weight")
        if quantizable(name) and len(info.shape) == 2 and kind == "nvfp4":
            entries += _nvfp4_entries(official, info)
            layers[layer] = {"format": "nvfp4"}
            quantized += 1
        elif quantizable(name) and len(info.shape) == 2:
            entries.append(Entry(official, code, tuple(info.shape), info))
            entries.append(Entry(layer + SCALE, "F32", (info.shape[0], 1), info, role="scale"))
            quantized += 1
        else:
            entries.append(Entry(official, info.dtype, tuple(info.shape), info))
    if layers:  # ComfyUI reads each layer's format from the header (and the comfy_quant tags)
        metadata = {**metadata, "_quantization_metadata": json.dumps({"format_version": "1.0", "layers": layers})}
    entries.sort(key=lambda e: (-STORED_ITEMSIZE[e.dtype], e.name))  # widest first: each tensor aligned
    placed, offset = {}, 0
    for e in entries:
        size = math.prod(e.shape) * STORED_ITEMSIZE[e.dtype]
        placed[e.name] = dataclasses.replace(e, begin=offset, end=offset + size)
        offset += size
    header = {"__metadata__": metadata}
    header.update(
        {e.name: {"dtype": e.dtype, "shape": list(e.shape), "data_offsets": [e.begin, e.end]} for e in placed.values()}
    )
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % ALIGN)
    return Plan(expert, placed, len(text).to_bytes(8, "little") + text, quantized)


def _nvfp4_entries(official: str, info: TensorInfo) -> list[Entry]:
    """A block linear's four tensors in ComfyUI's nvfp4 format (the module docstring)."""
    rows, cols = info.shape
    if cols % nvfp4.BLOCK:
        raise ValueError(f"{info.name} has {cols} inputs, not a multiple of {nvfp4.BLOCK}: NVFP4 cannot store it")
    layer = official.removesuffix(".weight")
    return [
        Entry(official, "U8", (rows, cols // 2), info),
        Entry(layer + SCALE, "F8_E4M3", nvfp4.blocked_shape(rows, cols // nvfp4.BLOCK), info, role="scale"),
        Entry(layer + SCALE + "_2", "F32", (), info, role="global"),
        Entry(layer + ".comfy_quant", "U8", (len(COMFY_TAG),), info, role="tag"),
    ]


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
    if kind == "nvfp4":
        # one per tensor (ComfyUI)
        global_scale = absmax_steps(wide, tuple(range(wide.ndim)), nvfp4.E2M1_MAX * nvfp4.E4M3_MAX)
        global_scale = torch.where(global_scale > 0, global_scale, torch.ones_like(global_scale))
        packed, block, _ = nvfp4.quantize(wide, global_scale)
        del wide
        values = {
            "weight": nvfp4.swap_nibbles(packed),  # ComfyUI's order: element 2j high
            "scale": nvfp4.to_blocked(block),
            "global": global_scale.reshape(()),
            "tag": torch.frombuffer(bytearray(COMFY_TAG), dtype=torch.uint8),
        }
    else:
        q, scale = quantize_rows(wide, kind)
        del wide
        values = {"weight": q, "scale": scale}
    for e in targets:
        yield e, values[e.role]


def scale_rule(kind: str) -> str:
    """The metadata's words for the scales."""
    if kind == "nvfp4":
        return (
            "ComfyUI nvfp4: e2m1 pairs (element 2j in the high nibble), float8_e4m3fn weight_scale per 16 inputs "
            "(absmax / 6 / weight_scale_2, cuBLAS's swizzled 128x4 layout), float32 weight_scale_2 = absmax / "
            "(6 · 448) per tensor; W = e2m1 · weight_scale · weight_scale_2"
        )
    return (
        f"float32 [out, 1], one per output channel: absmax / {LIMIT[KINDS[kind]]:g}; "
        f"W = q · scale (parallel_wan.weights.quantized.form.quantize_rows, as quantize={kind} at load)"
    )
