"""Per-device memory of the JAX VAE decode, whole on one device against split by height over
several, from XLA's own accounting of the compiled programs (`memory_analysis()`: the
arguments, output and temporaries one device holds), plus compile and run time.

The built-in tiny model's Wan 2.1 VAE (z 16, base 8 channels), one video of 17 frames.
Memory is what the split is for: on 2 CPU cores the virtual devices share the cores, so the
split decode cannot be faster here.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m benchmarks.jax_vae_decode
    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m benchmarks.jax_vae_decode --size 256 --frames 17
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=128, help="video height = width in pixels (multiple of 16)")
    p.add_argument("--frames", type=int, default=17)
    p.add_argument("--devices", nargs="+", type=int, default=[1, 2, 4, 8])
    args = p.parse_args(argv)
    import jax

    from parallel_wan.backends.jax.backend import JaxBackend
    from parallel_wan.builtin.tiny import build_tiny, write_checkpoint
    from parallel_wan.config import MeshSpec
    from parallel_wan.weights.loader import load_vae

    with tempfile.TemporaryDirectory() as folder:
        cfg, host_params = load_vae(write_checkpoint(build_tiny("t2v", seed=0), folder, "diffusers"), "float32")
    h = args.size // cfg.scale_factor_spatial
    shape = (1, cfg.z_dim, (args.frames - 1) // cfg.scale_factor_temporal + 1, h, h)
    z = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    print(
        f"Tiny Wan 2.1 VAE, {args.size}×{args.size}×{args.frames} frames (latents {shape}), float32, "
        f"{jax.device_count()} {jax.default_backend()} devices.\n"
    )
    print(
        "| devices | rows per device | per-device memory MB (args + output + temp) | compile s | decode s | "
        "frames equal to 1 device |"
    )
    print("|---|---|---|---|---|---|")
    reference = None
    for n in args.devices:
        backend = JaxBackend(MeshSpec(name=f"cp{n}", cp=n, ring=n))
        decoder = backend.video_decoder(backend.place(host_params, "float32"), cfg)
        t0 = time.perf_counter()
        (label,) = decoder.compile(shape)
        compile_s = time.perf_counter() - t0
        entry = decoder._program(shape)
        mem = entry["compiled"].memory_analysis()
        per_device = (mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes) / 2**20
        latents = backend.to_device(z)
        decoder(latents)
        t0 = time.perf_counter()
        (frames,) = decoder(latents)
        run_s = time.perf_counter() - t0
        reference = frames if reference is None else reference
        same = int(np.abs(frames.astype(int) - reference).max())
        print(
            f"| {entry['split']} | {h // entry['split']} | {per_device:.1f} ({mem.argument_size_in_bytes / 2**20:.1f} "
            "+ "
            f"{mem.output_size_in_bytes / 2**20:.1f} + {mem.temp_size_in_bytes / 2**20:.1f}) | {compile_s:.1f} "
            f"| {run_s:.2f} | max diff {same} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
