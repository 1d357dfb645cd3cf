"""Weight-loading throughput against the page-cache read of the same bytes and against diffusers.

Writes a synthetic Wan-shaped expert in the diffusers layout (the real A14B block: dim 5120,
FFN 13824, 40 heads; a few layers instead of 40; ~1 GB shards with an index) in float32 — the
dtype of the diffusers-format A14B transformer files — or bf16 (--source-dtype bfloat16), warms
the page cache, then times in one run, every load producing bf16 weights (norms, embeddings and
modulation kept fp32):

- read(): the files' bytes into a reused, already-touched buffer with readinto, by one
  thread and by as many threads as our loader copies with — what the page cache delivers,
  the ceiling for any loader of warm files (the hardware peer, "raw read");
- read() into fresh memory: the same, into a new buffer each time (4 KiB-page faults included,
  the cost every loader that allocates pays);
- ours (`load_transformer(..., "bfloat16")`): one copy out of the mapped files with the cast
  and the NaN/inf check fused in (weights/copy_pool.py, weights/finite.py), and the same load
  without the check (the plain copy it replaced: what the check costs);
- diffusers' `WanTransformer3DModel.from_pretrained(folder, torch_dtype=torch.bfloat16)` (it
  needs `accelerate` for this model: `pip install 'parallel_wan[bench]'`; the row is skipped
  without it). From fp32 files it casts each mapped tensor into new memory, one copy like
  ours. From bf16 files it keeps every parameter as a view of the mapped file, so its load is
  a map; --all-rows adds "+ one read of every byte" (what a first forward or a device upload
  then pays) and, for ours, → fp32, one more copy thread, 4 KiB-page destinations and the
  converted-weights cache (miss, hit, hit + a read).

Throughput is checkpoint bytes on disk / wall seconds; each row is the best of --repeats runs
after one untimed run. Memory: the page cache holds the checkpoint, plus one result at a time
(bf16, half the fp32 checkpoint) and two 1 GiB read buffers; 4 fp32 layers = 6.55 GB on disk.

    python -m benchmarks.load                                  # 4 fp32 layers ≈ 6.6 GB on disk
    python -m benchmarks.load --source-dtype bfloat16 --all-rows
    python -m benchmarks.load --layers 2 --repeats 2 --dir /data/tmp --keep
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from parallel_wan.models.transformer import keeps_fp32
from parallel_wan.models.transformer_config import TransformerConfig
from parallel_wan.models.transformer_shapes import param_shapes
from parallel_wan.weights import copy_pool
from parallel_wan.weights.layout import Checkpoint
from parallel_wan.weights.loader import load_transformer
from parallel_wan.weights.safetensors_io import read_header

SHARD_BYTES = 1 << 30
A14B_BLOCK = dict(
    num_attention_heads=40,
    attention_head_dim=128,
    ffn_dim=13824,
    text_dim=4096,
    freq_dim=256,
    in_channels=16,
    out_channels=16,
    patch_size=[1, 2, 2],
    cross_attn_norm=True,
    qk_norm="rms_norm_across_heads",
    eps=1e-6,
    rope_max_seq_len=1024,
)


# ------------------------------------------------------------------------------ the checkpoint
def write_synthetic_expert(
    folder: Path, layers: int, dtype: torch.dtype = torch.float32, block: dict = A14B_BLOCK
) -> Path:
    """A diffusers-layout `transformer/` folder of random `dtype` weights with `block`'s shapes
    (default A14B's)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    config = {"_class_name": "WanTransformer3DModel", **block, "num_layers": layers}
    shapes = param_shapes(TransformerConfig.from_diffusers(config))
    generator = torch.Generator().manual_seed(0)
    groups: list[list[str]] = [[]]
    size = 0
    itemsize = torch.empty((), dtype=dtype).element_size()
    for name, shape in shapes.items():
        nbytes = math.prod(shape) * itemsize
        if groups[-1] and size + nbytes > SHARD_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += nbytes
    weight_map = {}
    for i, group in enumerate(groups):
        file = f"diffusion_pytorch_model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file(
            {n: torch.randn(shapes[n], generator=generator, dtype=dtype) for n in group},
            folder / file,
            metadata={"format": "pt"},
        )
        weight_map.update(dict.fromkeys(group, file))
    total = sum(math.prod(s) * itemsize for s in shapes.values())
    (folder / "diffusion_pytorch_model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
    )
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def as_checkpoint(folder: Path) -> Checkpoint:
    """Only what the transformer loader reads; the other components are not part of this benchmark."""
    config = TransformerConfig.from_diffusers(json.loads((folder / "config.json").read_text()))
    return Checkpoint(
        root=folder,
        layout="diffusers",
        experts={"single": folder},
        transformers={"single": config},
        vae_path=None,
        vae_kind=None,
        vae_config=None,
        text_encoder_path=None,
        text_encoder_format=None,
        tokenizer_path=None,
        scheduler_config=None,
    )


def weight_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors"))


# ------------------------------------------------------------------------------ measurements
def page_cache_rates(root: Path, layers: int, repeats: int, block: dict = A14B_BLOCK) -> dict:
    """The two figures the GPU acceptance run keeps (benchmarks/gpu_acceptance): the page
    cache's read() rate into a reused buffer and our bf16 load's, both GB/s of fp32 checkpoint
    bytes, best of `repeats` after the cache is warmed."""
    folder = write_synthetic_expert(root / "transformer", layers, torch.float32, block)
    files = weight_files(folder)
    nbytes = sum(p.stat().st_size for p in files)
    os.sync()
    for _ in range(2):
        read_into(files, None)
    buffer = torch.zeros(max(p.stat().st_size for p in files), dtype=torch.uint8)
    ckpt = as_checkpoint(folder)
    read_s = timed(lambda: read_into(files, buffer), repeats)
    ours_s = timed(lambda: load_transformer(ckpt, "single", "bfloat16", keeps_fp32), repeats)
    return {
        "checkpoint_gb": nbytes / 1e9,
        "layers": layers,
        "copy_threads": copy_pool.load_threads(),
        "read_gbps": nbytes / min(read_s) / 1e9,
        "ours_fp32_to_bf16_gbps": nbytes / min(ours_s) / 1e9,
        "ours_vs_read": min(read_s) / min(ours_s),
    }


def timed(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
        del result
    gc.collect()
    return times


def read_into(files: list[Path], buffer: torch.Tensor | None):
    """Every byte of `files` through read() into `buffer` (or a fresh one per file)."""
    chunk = 64 << 20
    for path in files:
        size = path.stat().st_size
        target = buffer[:size] if buffer is not None else torch.empty(size, dtype=torch.uint8)
        view = memoryview(target.numpy())
        with open(path, "rb", buffering=0) as f:
            done = 0
            while done < size:
                got = f.readinto(view[done : done + chunk])
                if not got:
                    raise OSError(f"{path}: short read")
                done += got
    return None


def read_parallel(files: list[Path], buffer: torch.Tensor, threads: int):
    """read() of every byte by `threads` threads (64 MiB pieces, pread), into a reused buffer:
    the page cache's bandwidth with as many readers as our loader has copy threads."""
    from concurrent.futures import ThreadPoolExecutor

    piece = 64 << 20
    view = memoryview(buffer.numpy())

    def read(job):
        path, offset, size = job
        fd = os.open(path, os.O_RDONLY)
        try:
            done = 0
            while done < size:
                got = os.preadv(fd, [view[offset + done : offset + size]], offset + done)
                if not got:
                    raise OSError(f"{path}: short read")
                done += got
        finally:
            os.close(fd)

    jobs = [(p, o, min(piece, p.stat().st_size - o)) for p in files for o in range(0, p.stat().st_size, piece)]
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(read, jobs))


def touch_every_byte(tensors, sink: torch.Tensor):
    """One read of every byte (a copy into `sink`, a reused, already-touched byte buffer), as a
    first forward or a device upload would read mapped weights."""
    for t in tensors:
        flat = t.reshape(-1).view(torch.uint8)
        sink[: flat.numel()].copy_(flat)
    return None


def leaves(params):
    from parallel_wan.weights import tree

    return [t for _, t in tree.iter_leaves(params)]


def with_threads(threads: int | None, fn):
    """Run fn with a copy pool of `threads` workers (None: the default), then restore it."""
    saved = os.environ.get("PARALLEL_WAN_LOAD_THREADS")
    copy_pool.shutdown()
    if threads is not None:
        os.environ["PARALLEL_WAN_LOAD_THREADS"] = str(threads)
    try:
        return fn()
    finally:
        copy_pool.shutdown()
        if saved is None:
            os.environ.pop("PARALLEL_WAN_LOAD_THREADS", None)
        else:
            os.environ["PARALLEL_WAN_LOAD_THREADS"] = saved


def without_huge_pages(fn):
    saved = copy_pool.HUGE_PAGE
    copy_pool.HUGE_PAGE = 1 << 62
    try:
        return fn()
    finally:
        copy_pool.HUGE_PAGE = saved


UNCHECKED = "the same load without the NaN/inf check"


def without_finite_check(fn):
    """The loader's copy as it was before weights/finite.py: one plain copy_, no chunks, no sums."""
    saved = copy_pool.copy_into

    def plain(destination, source):
        destination.copy_(source)
        return 0

    copy_pool.copy_into = plain
    try:
        return fn()
    finally:
        copy_pool.copy_into = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=4, help="A14B-shaped blocks (1.4 GB each in fp32, 0.70 in bf16)")
    parser.add_argument(
        "--source-dtype",
        choices=["float32", "bfloat16"],
        default="float32",
        help="dtype of the synthetic files; every load produces bf16 (norms etc. fp32)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write the checkpoint (default: a temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoint and cache afterwards")
    parser.add_argument("--skip-diffusers", action="store_true")
    parser.add_argument(
        "--lora-rank",
        type=int,
        default=64,
        help="also load with a LoRA of this rank on every linear layer of every block (0: no row)",
    )
    parser.add_argument(
        "--all-rows",
        action="store_true",
        help="also: ours → fp32, one more copy thread, 4 KiB pages, the cache, diffusers + a read",
    )
    args = parser.parse_args()
    source = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.source_dtype]
    short = {"float32": "fp32", "bfloat16": "bf16"}[args.source_dtype]

    root = Path(args.dir or tempfile.mkdtemp(prefix="parallel_wan_load_"))
    folder = root / "transformer"
    cache_dir = root / "weights_cache"
    try:
        if (folder / "config.json").is_file():
            stored = read_header(weight_files(folder)[0])
            if any(info.torch_dtype != source for info in stored.values()):
                raise SystemExit(
                    f"{folder} holds another dtype than --source-dtype {args.source_dtype}; "
                    "delete it or pass another --dir"
                )
        else:
            start = time.perf_counter()
            write_synthetic_expert(folder, args.layers, source)
            print(f"wrote {folder} in {time.perf_counter() - start:.0f} s")
        files = weight_files(folder)
        nbytes = sum(p.stat().st_size for p in files)
        ckpt = as_checkpoint(folder)
        cores = copy_pool.load_threads()
        thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
        print(
            f"checkpoint: {len(files)} shards, {nbytes / 1e9:.2f} GB {args.source_dtype}, "
            f"{ckpt.transformers['single'].num_layers} A14B-shaped layers | cores: {os.cpu_count()} (copy threads "
            f"{cores}, torch intra-op threads {torch.get_num_threads()}) | THP: "
            f"{thp.read_text().strip() if thp.exists() else 'n/a'} | load average before: {os.getloadavg()[0]:.1f}"
        )

        os.sync()  # the freshly written shards' writeback must not run during the timings
        for _ in range(2):
            read_into(files, None)  # warm the page cache: every row below reads cached pages
        buffer = torch.zeros(max(p.stat().st_size for p in files), dtype=torch.uint8)
        sink = torch.zeros(buffer.numel(), dtype=torch.uint8)

        def ours(dtype):
            return lambda: load_transformer(ckpt, "single", dtype, keeps_fp32)

        def cached():
            return load_transformer(ckpt, "single", "bfloat16", keeps_fp32, cache_dir=cache_dir)

        def cache_miss():
            shutil.rmtree(cache_dir, ignore_errors=True)
            result = cached()
            os.sync()  # the entry's writeback belongs to this row, not the next
            return result

        ours_label = f"ours {short} → bf16 (load_transformer)"
        methods = [
            (READ_REUSED, lambda: read_into(files, buffer)),
            (f"read(), {cores} threads, reused buffer", lambda: read_parallel(files, buffer, cores)),
            (READ_FRESH, lambda: read_into(files, None)),
            (ours_label, ours("bfloat16")),
            (UNCHECKED, lambda: without_finite_check(ours("bfloat16"))),
        ]
        lora_label = deferred_label = None
        if args.lora_rank:
            lora = write_synthetic_lora(root / "lora.safetensors", ckpt.transformers["single"], args.lora_rank)
            lora_label = f"ours {short} → bf16 + LoRA rank {args.lora_rank} merged"
            deferred_label = f"  the same on a GPU run: the host's part ({short} left as stored)"
            methods.append(
                (
                    lora_label,
                    lambda: load_transformer(ckpt, "single", "bfloat16", keeps_fp32, lora=expert_with(lora, ckpt)),
                )
            )
            methods.append(
                (
                    deferred_label,
                    lambda: load_transformer(
                        ckpt, "single", "bfloat16", keeps_fp32, lora=expert_with(lora, ckpt), lora_on_device=True
                    ),
                )
            )
        if args.all_rows:
            methods += [
                (f"ours {short} → fp32", ours("float32")),
                (f"ours {short} → bf16, {cores + 1} copy threads", lambda: with_threads(cores + 1, ours("bfloat16"))),
                (f"ours {short} → bf16, 4 KiB pages", lambda: without_huge_pages(ours("bfloat16"))),
                ("cache miss: convert + write the entry", cache_miss),
                ("cache hit: map the entry", cached),
                ("cache hit + one read of every byte", lambda: touch_every_byte(leaves(cached()), sink)),
            ]
        from diffusers.utils import is_accelerate_available

        diffusers_label = "diffusers from_pretrained(torch_dtype=bf16)"
        if args.skip_diffusers:
            pass
        elif not is_accelerate_available():
            # Without accelerate, diffusers refuses Wan's fp32-kept modules outright.
            print(
                "diffusers rows skipped: from_pretrained needs accelerate for this model "
                "(pip install 'parallel_wan[bench]')"
            )
        else:
            from diffusers import WanTransformer3DModel
            from diffusers.utils import logging as diffusers_logging

            diffusers_logging.disable_progress_bar()

            def diffusers_load():
                return WanTransformer3DModel.from_pretrained(str(folder), torch_dtype=torch.bfloat16)

            methods.append((diffusers_label, diffusers_load))
            if args.all_rows:
                methods.append(
                    (
                        "diffusers + one read of every byte",
                        lambda: touch_every_byte(list(diffusers_load().state_dict().values()), sink),
                    )
                )
        # Each row: one untimed run, then its timed runs back to back — the steady state of that
        # method. Untimed runs matter on this VM: memory the guest has not touched yet is slow to
        # fault in (0.4–0.8 GB/s), and huge pages are fast only when freed ones are at hand, so a
        # row's first run mostly measures what the row before it left behind.
        rows = {}
        for label, fn in methods:
            timed(fn, 1)
            rows[label] = timed(fn, args.repeats)
            print(f"  {label}: {', '.join(f'{t:.2f}' for t in rows[label])} s", flush=True)

        best = {label: min(times) for label, times in rows.items()}
        peer = min(t for label, t in best.items() if label.startswith("read()") and "reused" in label)
        print(f"\n| {'':46s} | {'best s':>8s} | {'median s':>9s} | {'GB/s':>7s} | {'vs best read()':>15s} |")
        print("|---|---|---|---|---|")
        for label, times in rows.items():
            print(
                f"| {label:46s} | {best[label]:8.3f} | {statistics.median(times):9.3f} | "
                f"{nbytes / best[label] / 1e9:7.2f} | {peer / best[label]:15.2f} |"
            )
        print(
            f"\nours vs the best read() of the same files: {peer / best[ours_label]:.2f} (target ≥ 0.5); "
            f"vs read() into fresh memory: {best[READ_FRESH] / best[ours_label]:.2f}"
        )
        print(
            f"the NaN/inf check (weights/finite.py): ours / the same load without it = "
            f"{best[ours_label] / best[UNCHECKED]:.2f}× wall (medians "
            f"{statistics.median(rows[ours_label]) / statistics.median(rows[UNCHECKED]):.2f}×)"
        )
        if lora_label is not None:
            flop, extra = merge_flop(ckpt.transformers["single"], args.lora_rank), best[lora_label] - best[ours_label]
            print(
                f"loading with the LoRA merged / without: {best[lora_label] / best[ours_label]:.2f}× (target ≤ 1.2×); "
                f"its GEMMs are {flop / 1e9:.0f} GFLOP: {flop / max(extra, 1e-9) / 1e9:.0f} GFLOP/s over the "
                f"{extra:.3f} s it adds"
            )
            print(
                f"a GPU run's host part of the same load (the merge on the device: python -m "
                f"benchmarks.lora_placement): {best[deferred_label] / best[ours_label]:.2f}× the plain load"
            )
        if diffusers_label in best:
            print(
                f"ours vs diffusers: {best[diffusers_label] / best[ours_label]:.2f}× (target ≥ 1.5×, issue 43)"
                + (
                    " — diffusers maps bf16 files and reads no byte, so this compares a copy with a map"
                    if source == torch.bfloat16
                    else ""
                )
            )
        print(
            f"load average after: {os.getloadavg()[0]:.1f}; command: python -m benchmarks.load --layers "
            f"{args.layers} --source-dtype {args.source_dtype} --repeats {args.repeats}"
            f"{' --all-rows' if args.all_rows else ''}"
        )
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def write_synthetic_lora(path: Path, cfg: TransformerConfig, rank: int) -> Path:
    """A ComfyUI-format LoRA (bf16, as the lightx2v files are) on every linear layer of every
    block: what a Lightning LoRA changes."""
    from safetensors.torch import save_file

    from parallel_wan.weights.transformer_keymap import diffusers_to_official_name

    dim, ffn, tensors = cfg.dim, cfg.ffn_dim, {}
    for i in range(cfg.num_layers):
        for module, (out, inp) in {
            **{f"attn{a}.{p}": (dim, dim) for a in (1, 2) for p in ("to_q", "to_k", "to_v", "to_out.0")},
            "ffn.net.0.proj": (ffn, dim),
            "ffn.net.2": (dim, ffn),
        }.items():
            stem = "diffusion_model." + diffusers_to_official_name(f"blocks.{i}.{module}.weight")[: -len(".weight")]
            tensors[f"{stem}.lora_down.weight"] = torch.randn(rank, inp, dtype=torch.bfloat16) * 0.01
            tensors[f"{stem}.lora_up.weight"] = torch.randn(out, rank, dtype=torch.bfloat16) * 0.01
            tensors[f"{stem}.alpha"] = torch.tensor(float(rank))
    save_file(tensors, str(path))
    return path


def merge_flop(cfg: TransformerConfig, rank: int) -> int:
    """The multiply-adds of `write_synthetic_lora`'s merge, counted as 2 FLOP: up·down of each pair,
    out × in × rank of them — the arithmetic no merge of a rank-r LoRA into dense weights avoids."""
    dim, ffn = cfg.dim, cfg.ffn_dim
    return cfg.num_layers * 2 * rank * (8 * dim * dim + 2 * dim * ffn)


def expert_with(lora: Path, ckpt: Checkpoint):
    """The expert's LoRA, opened and checked as a run does (headers only)."""
    from parallel_wan.lora.merge import expert_lora

    return expert_lora("single", [(str(lora), 1.0, "lora")], param_shapes(ckpt.transformers["single"]))


READ_REUSED = "read() into a reused buffer (page cache)"
READ_FRESH = "read() into fresh memory"


if __name__ == "__main__":
    main()
