"""Loading a quantized expert file against its bf16 equivalent, both from the page cache.

Writes two single-file experts of the same random weights with the real A14B block shapes (dim
5120, FFN 13824, 40 heads; a few layers instead of 40), official Wan names: a bf16 file
(ComfyUI's repackaged experts) and a float8_e4m3fn file with per-output-channel scales
(LightX2V's layout; the block linears quantized, everything else bf16, as the converters keep
it). Warms the page cache, then times `load_transformer` on each in one run, as a run loads
them (`weights=FILE`: weights/expert_file.py) into a bf16 run: the bf16 file's tensors copied
as they are, the fp8 file's block linears kept float8 with float32 (out, 1) scales — half the
bytes read and written — and each checked for NaN as it is copied (weights/finite.py).

    python -m benchmarks.quantized_load                      # 6 layers: 4.7 GB bf16, 2.6 GB fp8
    python -m benchmarks.quantized_load --layers 2 --repeats 3 --dir /data/tmp

The tensors outside the blocks (text and time embeddings, head: 0.46 GB) stay bf16 in both
files, so the bytes ratio grows with the layers: 1.69 at 3 layers, 1.81 at 6, 1.97 at 40.

Rows are the best of --repeats after one untimed load each; the ratio is bf16 time / fp8 time.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.load import A14B_BLOCK, timed
from parallel_wan.models.transformer import keeps_fp32
from parallel_wan.models.transformer_config import TransformerConfig
from parallel_wan.models.transformer_shapes import param_shapes
from parallel_wan.weights.expert_file import describe_expert_file
from parallel_wan.weights.layout import Checkpoint
from parallel_wan.weights.loader import load_transformer
from parallel_wan.weights.quantized.form import quantize_rows
from parallel_wan.weights.quantized.names import quantizable
from parallel_wan.weights.transformer_keymap import diffusers_to_official_name


def config(layers: int) -> TransformerConfig:
    return TransformerConfig.from_diffusers(
        {"_class_name": "WanTransformer3DModel", **A14B_BLOCK, "num_layers": layers}
    )


def write_files(folder: Path, cfg: TransformerConfig) -> tuple[Path, Path]:
    """(bf16 file, fp8 file) of the same random weights (the same seed), official names; one
    file's tensors in memory at a time."""
    from safetensors.torch import save_file

    paths = []
    for kind in ("bf16", "fp8"):
        generator = torch.Generator().manual_seed(0)
        tensors = {}
        for name, shape in param_shapes(cfg).items():
            w = (torch.randn(shape, generator=generator) * 0.02).to(torch.bfloat16)
            official = diffusers_to_official_name(name)
            if kind == "fp8" and quantizable(name):
                q, scale = quantize_rows(w, "fp8")
                tensors[official], tensors[official.removesuffix(".weight") + ".weight_scale"] = q, scale
            else:
                tensors[official] = w
        paths.append(folder / f"expert_{kind}.safetensors")
        save_file(tensors, str(paths[-1]))
        del tensors
    return paths[0], paths[1]


def checkpoint(folder: Path, cfg: TransformerConfig, file: Path) -> Checkpoint:
    """Only what the transformer loader reads, the expert given as one file."""
    return Checkpoint(
        root=folder,
        layout="official",
        experts={"single": folder},
        transformers={"single": cfg},
        vae_path=None,
        vae_kind=None,
        vae_config=None,
        text_encoder_path=None,
        text_encoder_format=None,
        tokenizer_path=None,
        scheduler_config=None,
        expert_files={"single": describe_expert_file("weights", file, cfg)},
    )


def warm(path: Path) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.read(64 << 20):
            pass


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where to write the files (default: a temporary folder)")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="pw_qload_", dir=args.dir))
    try:
        cfg = config(args.layers)
        files = write_files(folder, cfg)
        rows = {}
        for label, path in zip(("bf16 file → bf16", "fp8 file → fp8 + scales"), files):
            ckpt = checkpoint(folder, cfg, path)
            warm(path)
            load_transformer(ckpt, "single", "bfloat16", keeps_fp32)  # untimed: page cache, pool, huge pages
            times = timed(lambda ckpt=ckpt: load_transformer(ckpt, "single", "bfloat16", keeps_fp32), args.repeats)
            rows[label] = (path.stat().st_size, min(times), statistics.median(times))
        print(
            f"python -m benchmarks.quantized_load --layers {args.layers} --repeats {args.repeats}   "
            f"({time.strftime('%Y-%m-%d %H:%M')}, torch threads {torch.get_num_threads()})"
        )
        print("| file | GB on disk | best s | median s | GB/s (best) |")
        print("|---|---|---|---|---|")
        for label, (size, best, median) in rows.items():
            print(f"| {label} | {size / 1e9:.2f} | {best:.3f} | {median:.3f} | {size / 1e9 / best:.2f} |")
        (_, bf16_best, bf16_median), (_, fp8_best, fp8_median) = rows.values()
        (bf16_size, *_), (fp8_size, *_) = rows.values()
        print(
            f"fp8 vs bf16: {bf16_best / fp8_best:.2f}× faster (best / best), "
            f"{bf16_median / fp8_median:.2f}× (median / median); bytes ratio {bf16_size / fp8_size:.2f}"
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
