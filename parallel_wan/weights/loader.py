"""Transformer experts and the VAE as param trees under diffusers names, from either layout.

An expert loads in one pass over its shards: the headers give every tensor's name, shape and
byte range; the official layout's names are mapped to diffusers names; each destination is
allocated once (the 40 blocks' copies of a tensor share one stacked buffer, `stacked.py`);
then the shared pool copies every tensor out of the mapped files with the cast to the run's
dtype fused in (`copy_pool.py`). The reference's float32 exceptions (norms, embeddings,
modulation tables: `keep_fp32`) are decided per name before allocation.

`shard=(index, count)` keeps dim-0 chunk `index` of `count` of every tensor, cut as
`torch.chunk` cuts (FSDP2's Shard(0)); only those rows' bytes are read. Sharded tensors are
independent buffers, not stacked views, so a sharding wrapper may own or free each one.

`load_transformer(..., cache_dir=…)` is the same load through the converted-weights cache (`converted_weights.py`).
The text encoder is a transformers module and loads in `parallel_wan/text/umt5.py`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from parallel_wan.models.vae_config import VaeConfig
from parallel_wan.weights import converted_weights, transformer_keymap, tree, vae_keymap
from parallel_wan.weights.copy_pool import copy_task, run_all
from parallel_wan.weights.derived_sources import Derived
from parallel_wan.weights.expert_file import QUANTIZED
from parallel_wan.weights.layout import Checkpoint, describe_checkpoint
from parallel_wan.weights.quantized.at_load import quantizing_copy
from parallel_wan.weights.quantized.form import quantized_targets
from parallel_wan.weights.quantized.lora_merge import merge_requantized
from parallel_wan.weights.quantized.names import global_scale_name, scale_name
from parallel_wan.weights.safetensors_io import (
    KeepFp32,
    TensorInfo,
    cast,
    chunk_rows,
    copy_from,
    load_pth_mapped,
    map_files,
    read_safetensors,
    shard_files,
    target_dtype,
    tensor_index,
    torch_dtype,
)
from parallel_wan.weights.stacked import Buffers, allocate

log = logging.getLogger("parallel_wan")
Shard = tuple[int, int]
Targets = dict[str, tuple[tuple[int, ...], torch.dtype]]
Source = TensorInfo | Derived  # a stored tensor, or one built from stored ones (derived_sources.py)


def load_transformer(
    checkpoint: Checkpoint | str | Path,
    expert: str,
    dtype: str = "bfloat16",
    keep_fp32: KeepFp32 | None = None,
    shard: Shard | None = None,
    lora=None,
    *,
    cache_dir: str | Path | None = None,
    quantize: str = "none",
    lora_on_device: bool = False,
) -> dict:
    """One expert's params tree: "high_noise" / "low_noise" (A14B) or "single" (TI2V-5B).

    keep_fp32(diffusers_name) → True keeps that tensor in float32 whatever `dtype` is (the model
    layer owns that policy: `parallel_wan.models.transformer.keeps_fp32`). shard=(index, count)
    keeps only dim-0 chunk `index` of `count` of each tensor (see the module docstring).
    lora: the expert's `lora.merge.ExpertLora`, merged into the tensors it changes in their one
    copy (a sharded load merges only its rows). lora_on_device: leave each plain tensor it changes
    as stored in the mapped file instead, named in `lora.deferred`, for the backend's placement
    to merge on the device (`ExpertLora.merge_on_device`; a whole load without the cache or
    quantize= only).
    quantize: "fp8" | "int8" stores each block linear's weight in one byte with a float32 scale
    per output channel (weights/quantized/at_load.py), quantized after its LoRA is merged; "none": as is.

    cache_dir: the converted-weights cache (`converted_weights.py`). A hit maps the cached file and returns
    views of it (no rename, no cast, no copy; sharded: a copy of this rank's rows only). A miss
    converts the checkpoint and, for a full load, writes the cache for the next start; a sharded
    load never writes (it holds a piece).
    """
    checkpoint = _as_checkpoint(checkpoint)
    sources = expert_sources(checkpoint, expert)
    target = torch_dtype(dtype)
    if lora_on_device and (lora is None or shard is not None or cache_dir is not None or quantize != "none"):
        raise ValueError(
            "lora_on_device needs a LoRA and a whole load without the weights cache or quantize= "
            "(the cache keeps merged weights; a shard or a quantized weight merges as it loads)"
        )
    if cache_dir is None:
        targets = _targets(sources, target, keep_fp32, shard, quantize)
        return tree.unflatten(_read(sources, targets, shard, lora, quantize, lora_on_device).flat)
    full = _targets(sources, target, keep_fp32, None, quantize)  # quantize= changes dtypes and adds scales: the key
    key = converted_weights.cache_key(
        checkpoint.experts[expert],
        _weight_files(checkpoint, expert),
        full,
        expert,
        checkpoint.layout,
        lora.identity() if lora is not None else None,
    )
    path = converted_weights.entry_path(cache_dir, expert, target, key)
    hit = converted_weights.open_entry(path, key, full)
    if hit is not None:
        return tree.unflatten(converted_weights.read_entry(hit, full, shard))
    buffers = _read(sources, _targets(sources, target, keep_fp32, shard, quantize), shard, lora, quantize)
    if shard is None:
        converted_weights.write_entry(
            path,
            key,
            buffers,
            {"checkpoint": str(checkpoint.root), "expert": expert, "layout": checkpoint.layout, "dtype": str(target)},
        )
    elif shard[0] == 0:
        log.info(
            "weights cache: no entry for %s in %s; a sharded load holds only its rows and writes none "
            "(one run with memory=resident or memory=swap writes it)",
            expert,
            cache_dir,
        )
    return tree.unflatten(buffers.flat)


def expert_sources(checkpoint: Checkpoint, expert: str) -> dict[str, Source]:
    """Diffusers name → where that tensor lies in the expert's files (headers only); an expert
    given as one file (`weights_high=` …: checkpoint.expert_files) comes from that file, a
    quantized weight with its float32 scale (weights/expert_file.py)."""
    if expert not in checkpoint.experts:
        raise ValueError(
            f"expert={expert!r} is not in the checkpoint at {checkpoint.root}; it has {', '.join(checkpoint.experts)}"
        )
    if expert in checkpoint.expert_files:
        return checkpoint.expert_files[expert].sources()
    folder = checkpoint.experts[expert]
    infos = tensor_index(folder)
    # The index's order (the state dict's), not file by file: a layer split across two shards
    # must list its tensors in the same order as every other layer (the JAX stacking checks it).
    ordered = {name: infos[name] for name in shard_files(folder)}
    return transformer_keymap.official_sources(ordered) if checkpoint.layout == "official" else ordered


def _weight_files(checkpoint: Checkpoint, expert: str) -> list[Path]:
    if expert in checkpoint.expert_files:
        return [checkpoint.expert_files[expert].path]
    folder = checkpoint.experts[expert]
    files = sorted(set(shard_files(folder).values()))
    return files + sorted(folder.glob("*.safetensors.index.json")) if folder.is_dir() else files


def _targets(
    sources: dict[str, Source],
    dtype: torch.dtype | None,
    keep_fp32: KeepFp32 | None,
    shard: Shard | None,
    quantize: str = "none",
) -> Targets:
    """Name → (shape this process keeps, dtype it gets)."""
    if shard is not None:
        chunk_rows(0, *shard)  # a bad shard fails here, once, before anything is read
    targets = {}
    for name, info in sources.items():
        shape = info.shape
        if shard is not None and shape:
            begin, end = chunk_rows(shape[0], *shard)
            shape = (end - begin, *shape[1:])
        if isinstance(info, Derived) and info.dtype is not None:  # a quantized weight as stored, a scale in float32
            targets[name] = (shape, info.dtype)
        elif isinstance(info, Derived):  # widened from a quantized tensor: the policy of a float32 tensor
            targets[name] = (shape, target_dtype(name, torch.float32, dtype, keep_fp32))
        else:
            targets[name] = (shape, target_dtype(name, info.torch_dtype, dtype, keep_fp32))
    # quantize= quantizes the wide block linears; a file's already quantized ones stay as stored
    return targets if quantize == "none" else quantized_targets(targets, quantize)


def _read(
    sources: dict[str, Source],
    targets: Targets,
    shard: Shard | None,
    lora=None,
    quantize: str = "none",
    lora_on_device: bool = False,
) -> Buffers:
    if lora is not None:
        missing = sorted(set(lora.targets) - set(sources))
        if missing:
            raise ValueError(
                f"the {lora.expert} expert's LoRA changes {missing[:3]}, which its checkpoint does not hold"
            )
    # merged on the device later: each left as stored, neither allocated nor copied here
    deferred = {n for n in lora.targets if not isinstance(sources[n], Derived)} if lora_on_device else set()
    buffers = allocate({n: t for n, t in targets.items() if n not in deferred}, stack=shard is None)
    mapped = map_files(info.file for info in sources.values())
    stored = {}
    order = sorted(sources, key=lambda n: (sources[n].file, sources[n].start))  # file order: streams a cold disk
    copies, requantize = [], []
    for name in order:
        info = sources[name]
        rows = chunk_rows(info.shape[0], *shard) if shard is not None and info.shape else None
        if isinstance(info, Derived):
            source = lambda info=info, rows=rows: info.make(mapped[info.file], rows)
        else:
            source = copy_from(mapped[info.file], info, rows)
        where, base, merging = str(info.file), source, False
        if name in deferred:
            stored[name] = source
            lora.deferred[name] = (f"{info.file} (with its LoRA merged on the device)", info.name or name)
            continue
        if lora is not None and name in lora and scale_name(name) in sources and targets[name][1] in QUANTIZED:
            requantize.append((name, rows))  # after the copy: dequantize, add, requantize (quantized/lora_merge.py)
        elif lora is not None and name in lora:  # merged in this copy: read, widen, add, cast once
            source, where = lora.merged_source(name, source, rows), f"{info.file} (with its LoRA merged)"
            merging = True
        origin = (where, info.name or name)
        if quantize != "none" and scale_name(name) in targets and scale_name(name) not in sources:
            flat = buffers.flat
            copies.append(
                quantizing_copy(
                    flat[name], flat[scale_name(name)], source, quantize, origin, flat.get(global_scale_name(name))
                )
            )
        elif merging:  # W's rows in cache-sized tiles: read, GEMM + add, cast and check (lora/merge.py)
            copies.append(lora.merging_copy(buffers.flat[name], name, base, rows, origin))
        else:
            copies.append(copy_task(buffers.flat[name], source, origin))
    run_all(copies)
    if deferred:  # the stored tensors (views of the mapped files) in the checkpoint's order
        buffers.flat = {name: stored[name]() if name in deferred else buffers.flat[name] for name in targets}
    for name, rows in requantize:
        merge_requantized(buffers.flat, name, lora, rows)
    if requantize:
        log.info(
            "%s expert: %d quantized weights changed by its LoRA were dequantized, merged in float32 and "
            "requantized per output channel",
            lora.expert,
            len(requantize),
        )
    return buffers


def load_vae(checkpoint: Checkpoint | str | Path, dtype: str = "float32") -> tuple[VaeConfig, dict]:
    """The VAE's config and params tree (diffusers names). The VAE runs in fp32 by default:
    its decode is a small share of the time and the reference decodes in fp32."""
    checkpoint = _as_checkpoint(checkpoint)
    if checkpoint.layout == "diffusers":
        flat = read_safetensors(checkpoint.vae_path, dtype=dtype)
    else:
        target = torch_dtype(dtype)
        mapped = vae_keymap.official_to_diffusers(load_pth_mapped(checkpoint.vae_path), checkpoint.vae_kind)
        flat = {name: cast(tensor, name, target, None, checkpoint.vae_path) for name, tensor in mapped.items()}
    return checkpoint.vae_config, tree.unflatten(flat)


def _as_checkpoint(checkpoint: Checkpoint | str | Path) -> Checkpoint:
    return checkpoint if isinstance(checkpoint, Checkpoint) else describe_checkpoint(checkpoint)
