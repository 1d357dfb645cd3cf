"""The converted-weights cache: one safetensors file per expert, already renamed, cast and stacked.

Opt-in (`weights_cache_dir=DIR`). The first start converts the checkpoint as usual and writes
what it produced; later starts map that file and hand out views of it, skipping the rename,
the cast and the copy. In the file each stacked buffer is one tensor named
"blocks.*.attn1.to_q.weight" of shape (layers, …), so a hit returns the same stacked layout
(per-layer dicts of views into one buffer) at no cost.

The key is sha256 over, for each weight file of the expert (shards and index): its name,
size, mtime_ns and safetensors header bytes; plus every tensor's target dtype (the run's
dtype and the float32 exceptions; under quantize=fp8|int8 the one-byte weights and their
`…weight_scale` names, so each quantize= setting has its own entry), the expert, the layout and FORMAT_VERSION. This
is enough
because the header fixes every tensor's name, dtype, shape and byte range, and anything that
rewrites a file (a re-download, a re-save, `cp` without -p) gives it a new mtime; fooling it
takes editing tensor bytes in place and then restoring the old mtime. Hashing the contents
instead would read every byte — the same read the cache exists to skip (28 GB per A14B
expert: seconds from page cache, minutes from disk). The checkpoint's folder is not part of
the key, so a copy with preserved timestamps still hits.

Writes are atomic (a temp file in the cache folder, fsync, rename), so a crash leaves no
half-written entry under the final name; concurrent ranks take a per-entry `flock` and only
the holder writes. An entry that does not parse, is cut short, or does not hold exactly the
expected tensors is ignored with a warning, and the conversion's result replaces it. A write
that fails (a full disk) warns and the run goes on.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import math
import os
import struct
from pathlib import Path

import torch

from parallel_wan.weights.copy_pool import copy_all, host_empty
from parallel_wan.weights.safetensors_io import (
    STORED_CODES,
    MappedFile,
    TensorInfo,
    chunk_rows,
    read_header_bytes,
)
from parallel_wan.weights.stacked import Buffers, layer_names, split_stacked_name

log = logging.getLogger("parallel_wan")

# Bump when the converted bytes for the same key would differ: a new fp32 policy that is not
# visible in the target dtypes, a different stacking rule, a change of this file format.
FORMAT_VERSION = "2"  # 2: written only from loads that refused NaN/inf (weights/finite.py)
_MARK = "parallel_wan_weights_cache"

Targets = dict[str, tuple[tuple[int, ...], torch.dtype]]


def cache_key(
    folder: Path, files: list[Path], targets: Targets, expert: str, layout: str, extra: list | None = None
) -> str:
    """The entry's key (see the module docstring); reads file stats and headers only. `extra`:
    more that decides the converted weights (each merged LoRA file's identity and scale)."""
    digest = hashlib.sha256()

    def add(*parts) -> None:
        for part in parts:
            data = part if isinstance(part, bytes) else str(part).encode()
            digest.update(struct.pack("<Q", len(data)) + data)

    add(_MARK, FORMAT_VERSION, expert, layout)
    for path in files:
        stat = path.stat()
        name = path.relative_to(folder) if path.is_relative_to(folder) else path.name
        header = read_header_bytes(path) if path.name.endswith(".safetensors") else path.read_bytes()
        add(name, stat.st_size, stat.st_mtime_ns, header)
    for name in sorted(targets):
        add(name, targets[name][1])
    for item in extra or []:
        add(sorted(item.items()) if isinstance(item, dict) else item)
    return digest.hexdigest()


def entry_path(cache_dir: str | Path, expert: str, dtype: torch.dtype | None, key: str) -> Path:
    dtype_name = str(dtype).removeprefix("torch.") if dtype is not None else "stored"
    return Path(cache_dir).expanduser() / f"{expert}-{dtype_name}-{key[:32]}.safetensors"


# ------------------------------------------------------------------------------ reading
def open_entry(path: Path, key: str, targets: Targets) -> MappedFile | None:
    """The mapped entry when it is there and sound; None on a miss (a warning if it was unusable)."""
    if not path.is_file():
        return None
    try:
        mapped = MappedFile(path)
        _check_entry(mapped, key, targets)
    except (OSError, ValueError) as exc:
        log.warning("weights cache %s is unusable (%s); converting the checkpoint again and rewriting it", path, exc)
        return None
    return mapped


def read_entry(mapped: MappedFile, targets: Targets, shard: tuple[int, int] | None) -> dict[str, torch.Tensor]:
    """Flat name → tensor. Whole: views of the mapped file (stacked entries stay one buffer).
    Sharded: copies of this rank's dim-0 chunks of each per-layer tensor, nothing else read."""
    flat: dict[str, torch.Tensor] = {}
    if shard is None:
        for entry, info in mapped.infos.items():
            stacked = split_stacked_name(entry)
            view = mapped.view(info)
            if stacked is None:
                flat[entry] = view
            else:
                flat.update(zip(layer_names(*stacked, info.shape[0]), view.unbind(0)))
        return {name: flat[name] for name in targets}
    copies = []
    for name, info in _per_layer_infos(mapped).items():
        rows = chunk_rows(info.shape[0], *shard) if info.shape else None
        shape = info.shape if rows is None else (rows[1] - rows[0], *info.shape[1:])
        flat[name] = host_empty(shape, info.torch_dtype)
        copies.append((flat[name], lambda info=info, rows=rows: mapped.view(info, rows), (str(mapped.path), name)))
    copy_all(copies)
    return {name: flat[name] for name in targets}


def _per_layer_infos(mapped: MappedFile) -> dict[str, TensorInfo]:
    """Every tensor the entry holds under its own name; a stacked entry's layers are
    consecutive byte ranges of it."""
    out = {}
    for entry, info in mapped.infos.items():
        stacked = split_stacked_name(entry)
        if stacked is None:
            out[entry] = info
            continue
        layers = info.shape[0]
        step = (info.end - info.start) // layers if layers else 0
        for i, name in enumerate(layer_names(*stacked, layers)):
            out[name] = TensorInfo(
                info.file, info.dtype, info.shape[1:], info.start + i * step, info.start + (i + 1) * step
            )
    return out


def _check_entry(mapped: MappedFile, key: str, targets: Targets | None) -> None:
    """Raises ValueError unless the entry is whole, for `key`, and holds exactly `targets`
    (not compared when None)."""
    metadata = _metadata(mapped.path)
    if metadata.get(_MARK) != FORMAT_VERSION or metadata.get("key") != key:
        raise ValueError(f"it was written for another checkpoint or format (format {metadata.get(_MARK)!r})")
    spans = sorted((info.start, info.end, name) for name, info in mapped.infos.items())
    position = spans[0][0] if spans else mapped.size
    for start, end, name in spans:
        info = mapped.infos[name]
        if start != position or end - start != math.prod(info.shape) * _itemsize(info.torch_dtype):
            raise ValueError(f"tensor {name} has an inconsistent byte range")
        position = end
    if position != mapped.size:
        raise ValueError(f"it holds {mapped.size} bytes but its header describes {position}; it was cut short")
    held = {name: (info.shape, info.torch_dtype) for name, info in _per_layer_infos(mapped).items()}
    if targets is not None and held != targets:
        wrong = sorted(set(held) ^ set(targets)) or sorted(n for n in held if held[n] != targets[n])
        raise ValueError(f"its tensors do not match the checkpoint's (e.g. {wrong[:3]})")


def _metadata(path: Path) -> dict:
    raw = read_header_bytes(path)
    return json.loads(raw[8:]).get("__metadata__") or {}


def _itemsize(dtype: torch.dtype) -> int:
    return dtype.itemsize  # a property of the dtype: no tensor made (under a fake mode that is an op)


# ------------------------------------------------------------------------------ writing
def write_entry(path: Path, key: str, buffers: Buffers, description: dict[str, str]) -> None:
    """Write the converted tensors as the entry for `key`, atomically; warn (not fail) on error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        log.warning("weights cache: cannot write %s (%s); the next start converts again", path, exc)
        return
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return  # another process is writing this entry
            raise
        # The lock holder is the only writer of this entry: any temp file of it is a leftover.
        for stale in path.parent.glob(f"{path.name}.*.tmp"):
            stale.unlink(missing_ok=True)
        if path.is_file():
            try:
                _check_entry(MappedFile(path), key, None)
                return  # written whole by another rank while this one converted
            except (OSError, ValueError):
                pass
        _write_atomically(path, _entries(buffers), {_MARK: FORMAT_VERSION, "key": key, **description})
        log.info("weights cache: wrote %s", path)
    except OSError as exc:
        log.warning("weights cache: writing %s failed (%s); the next start converts again", path, exc)
    finally:
        os.close(lock)


def _entries(buffers: Buffers) -> dict[str, torch.Tensor]:
    """The stacked buffers under their "blocks.*." names, and every tensor outside them."""
    in_stacks = set()
    for entry, buffer in buffers.stacked.items():
        in_stacks.update(layer_names(*split_stacked_name(entry), buffer.shape[0]))
    entries = dict(buffers.stacked)
    entries.update({name: t for name, t in buffers.flat.items() if name not in in_stacks})
    return entries


def _write_atomically(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """A safetensors file written by hand, so a stacked buffer goes out as one tensor and the
    order is ours: widest dtypes first, which keeps every tensor aligned to its element size."""
    order = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
    header: dict = {"__metadata__": metadata}
    offset = 0
    for name in order:
        t = tensors[name]
        nbytes = t.numel() * t.element_size()
        header[name] = {
            "dtype": STORED_CODES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(temp, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            for name in order:
                t = tensors[name]
                if t.numel():
                    f.write(memoryview(t.contiguous().reshape(-1).view(torch.uint8).numpy()))
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
