"""The JAX VAE decode on CPU against torch's, in one process (issue 38, item 12), and what a
tiny CLI run spends compiling.

    OMP_NUM_THREADS=1 python -m benchmarks.jax_cpu_decode              # the decode: ~1 min
    OMP_NUM_THREADS=1 python -m benchmarks.jax_cpu_decode --cli        # + 5 CLI runs: ~3 min

The decode: the built-in tiny model's Wan 2.1 VAE (float32), the latents of the CLI's default
128×128×17 video, decoded by
- torch: `models.vae.decode` with the torch ops (what the torch backend runs on one rank);
- JAX, ops' convolutions: the decode program (`vae_codec.decode_program`, a `lax.scan` over
  latent frames) with ops.py's channels-first 3-D/2-D convolutions — the CPU program before
  issue 38 (and what TPU/GPU programs still trace);
- JAX, cpu_convs: the same program as the CPU runs it now (`backends/jax/cpu_convs.py`).
Compile: wall and CPU seconds of `lower().compile()`; decode: median and best wall seconds of
`--repeats` calls after one warm-up; the largest uint8 difference from torch's frames. The
torch rows run first, then each JAX program (interleaving the runtimes made each one's idle
threads slow the other: BENCHMARKS.md "Per-step time against the PyTorch backend (CPU)").

--cli adds the CLI's own numbers (each run's sidecar `timings_s` / `compile`): `backend=jax`
twice with one fresh JAX persistent compilation cache (JAX_COMPILATION_CACHE_DIR), torch eager,
and torch `compile=true` twice with one fresh Inductor cache (TORCHINDUCTOR_CACHE_DIR): the
first of each pair is a first run on a machine, the second a repeat run.

The machine is shared: the load average is printed before and after, and the ratios are the
result.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _times(fn, repeats: int) -> tuple[float, float, object]:
    out = fn()  # warm-up: first-use costs (kernel setup, page faults) are not the decode's
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls), min(walls), out


def decode_rows(size: int, frames: int, repeats: int) -> None:
    import jax
    import torch

    from parallel_wan.backends.jax import ops as jops, spmd_ops, vae_codec
    from parallel_wan.backends.torch import ops as tops
    from parallel_wan.builtin.tiny import build_tiny, write_checkpoint
    from parallel_wan.models import vae
    from parallel_wan.report.frames import to_uint8_frames
    from parallel_wan.weights.loader import load_vae

    with tempfile.TemporaryDirectory() as folder:
        cfg, host = load_vae(write_checkpoint(build_tiny("t2v", seed=0), folder, "diffusers"), "float32")
    h = size // cfg.scale_factor_spatial
    shape = (1, cfg.z_dim, (frames - 1) // cfg.scale_factor_temporal + 1, h, h)
    z = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    print(
        f"Tiny Wan 2.1 VAE, {size}×{size}×{frames} frames (latents {shape}), float32, torch threads "
        f"{torch.get_num_threads()}, {jax.default_backend()}; load average {_load()}\n"
    )
    print(
        "| decode | compile s wall (CPU) | decode s median / best | JAX / torch (median) | max uint8 diff from torch |"
    )
    print("|---|---|---|---|---|")

    zt = torch.from_numpy(z)
    with torch.inference_mode():
        med_t, best_t, ref = _times(
            lambda: to_uint8_frames(vae.decode(host, vae.denormalize_latents(zt, cfg, tops), tops, cfg), tops).numpy(),
            repeats,
        )
    print(f"| torch (`models.vae.decode`, torch ops) | — | {med_t:.2f} / {best_t:.2f} | 1.00× | 0 |", flush=True)

    params = jax.tree.map(jax.numpy.asarray, host)
    plain = {"conv3d": spmd_ops.conv3d, "conv2d": spmd_ops.conv2d}
    for label, convs in (
        ("JAX, ops' convolutions (before)", {"conv3d": jops.conv3d, "conv2d": jops.conv2d}),
        ("JAX, cpu_convs (now)", plain),
    ):
        for name, fn in convs.items():
            setattr(spmd_ops, name, fn)
        jax.clear_caches()
        c0, t0 = time.process_time(), time.perf_counter()
        program = jax.jit(vae_codec.decode_program(cfg)).lower(params, z).compile()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        med, best, out = _times(lambda program=program: np.asarray(program(params, z)), repeats)
        diff = int(np.abs(out.astype(np.int16) - ref.astype(np.int16)).max())
        print(
            f"| {label} | {wall:.1f} ({cpu:.1f}) | {med:.2f} / {best:.2f} | {med / med_t:.2f}× | {diff} |", flush=True
        )
    for name, fn in plain.items():
        setattr(spmd_ops, name, fn)
    print(f"\nload average after: {_load()}")


def _cli(overrides: list[str], env: dict, out: str) -> dict:
    cmd = [sys.executable, "-m", "parallel_wan.run", *overrides, f"output_dir={out}"]
    t0 = time.perf_counter()
    subprocess.run(cmd, env={**os.environ, **env}, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    with open(os.path.join(out, "video.json")) as f:
        sidecar = json.load(f)
    return {"wall": wall, **sidecar["timings_s"], "programs": sidecar.get("compile", {})}


def cli_rows() -> None:
    print(f"\nCLI runs of the tiny model (128×128×17, 10 steps, bfloat16); load average {_load()}\n")
    print("| command | cache | process wall s | compile s | denoise s | vae_decode s | total s |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        jax_cache = {"JAX_COMPILATION_CACHE_DIR": os.path.join(folder, "jax_cache")}
        inductor = {"TORCHINDUCTOR_CACHE_DIR": os.path.join(folder, "inductor")}
        runs = [
            ("backend=jax", ["backend=jax"], jax_cache, "empty JAX cache"),
            ("backend=jax", ["backend=jax"], jax_cache, "JAX cache of the run above"),
            ("(torch)", [], {}, "—"),
            ("compile=true", ["compile=true"], inductor, "empty Inductor cache"),
            ("compile=true", ["compile=true"], inductor, "Inductor cache of the run above"),
        ]
        for i, (label, overrides, env, cache) in enumerate(runs):
            r = _cli(overrides, env, os.path.join(folder, f"run{i}"))
            compile_s = f"{r['compile']:.2f}" if "compile" in r else "—"
            print(
                f"| `{label}` | {cache} | {r['wall']:.1f} | {compile_s} | {r['denoise']:.2f} | {r['vae_decode']:.2f} "
                f"| {r['total']:.2f} |",
                flush=True,
            )
    print(f"\nload average after: {_load()}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=128, help="video height = width in pixels (multiple of 16)")
    p.add_argument("--frames", type=int, default=17)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--cli", action="store_true", help="also time CLI runs (JAX, torch, torch compile=true)")
    args = p.parse_args(argv)
    from parallel_wan.launch.backend_choice import keep_jax_off_libtpu

    keep_jax_off_libtpu(os.environ)  # as the JAX backend does: no libtpu probe on a host without a TPU
    decode_rows(args.size, args.frames, args.repeats)
    if args.cli:
        cli_rows()


if __name__ == "__main__":
    main()
