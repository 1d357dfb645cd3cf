"""Compile time of the JAX denoising step against the layer count: the block stack as one
`lax.scan` over stacked layers (what the backend runs) against the same blocks unrolled.

The step is the real one (backends/jax/predictor.make_step: sequence-parallel forward under
`shard_map`, CFG batch of 2 and the guidance combine), at the tiny model's width (8 heads of
16, FFN 256), for 2, 8 and 40 layers (40 = A14B's depth). Unrolled means `ops.scan_layers`
replaced by a Python loop, so XLA sees every layer. Compile = `jit(...).lower(...).compile()`,
timed from a fresh function each time (no cache).

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m benchmarks.jax_compile
    python -m benchmarks.jax_compile --layers 2 8 --mesh 1 1 1 --no-unrolled
"""

from __future__ import annotations

import argparse
import os
import time
import types

import numpy as np


def tiny_params(cfg, seed: int = 0) -> dict:
    """Random DiT params in the diffusers tree layout (per-layer list under "blocks")."""
    rng = np.random.default_rng(seed)
    dim, ffn, text, freq = cfg.dim, cfg.ffn_dim, cfg.text_dim, cfg.freq_dim
    patch = int(np.prod(cfg.patch_size))

    def w(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    def lin(o, i):
        return {"weight": w(o, i), "bias": w(o)}

    def attn(kv_dim):
        return {
            "to_q": lin(dim, dim),
            "to_k": lin(dim, kv_dim),
            "to_v": lin(dim, kv_dim),
            "to_out": [lin(dim, dim)],
            "norm_q": {"weight": w(dim)},
            "norm_k": {"weight": w(dim)},
        }

    block = lambda: {
        "attn1": attn(dim),
        "attn2": attn(dim),
        "norm2": {"weight": w(dim), "bias": w(dim)},
        "ffn": {"net": [{"proj": lin(ffn, dim)}, None, lin(dim, ffn)]},
        "scale_shift_table": w(1, 6, dim),
    }
    return {
        "patch_embedding": {"weight": w(dim, cfg.in_channels, *cfg.patch_size), "bias": w(dim)},
        "condition_embedder": {
            "time_embedder": {"linear_1": lin(dim, freq), "linear_2": lin(dim, dim)},
            "time_proj": lin(6 * dim, dim),
            "text_embedder": {"linear_1": lin(dim, text), "linear_2": lin(dim, dim)},
        },
        "blocks": [block() for _ in range(cfg.num_layers)],
        "scale_shift_table": w(1, 2, dim),
        "proj_out": lin(patch * cfg.out_channels, dim),
    }


def unrolled_ops():
    """The JAX ops namespace with the layer scan replaced by a Python loop over layers."""
    import jax

    from parallel_wan.backends.jax import ops

    def scan_layers(block_fn, carry, layers):
        for i in range(ops.num_layers(layers)):
            carry = block_fn(carry, jax.tree.map(lambda a: a[i], layers))
        return carry

    names = {k: getattr(ops, k) for k in dir(ops) if not k.startswith("__")}
    return types.SimpleNamespace(**{**names, "scan_layers": scan_layers})


def compile_seconds(layers: int, mesh_shape, unrolled: bool, tokens_grid=(3, 8, 8)) -> tuple[float, float]:
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    from parallel_wan.backends.jax import placement, predictor as pred
    from parallel_wan.backends.jax.sequence_parallel import CP, build_mesh
    from parallel_wan.models import transformer as dit
    from parallel_wan.models.rope import rope_tables
    from parallel_wan.models.transformer_config import TransformerConfig

    cfg = TransformerConfig(
        num_attention_heads=8,
        attention_head_dim=16,
        in_channels=16,
        out_channels=16,
        text_dim=32,
        freq_dim=32,
        ffn_dim=256,
        num_layers=layers,
    )
    dp, ring, ulysses = mesh_shape
    mesh = build_mesh(dp, ring, ulysses, devices=jax.devices()[: dp * ring * ulysses])
    params = placement.place(tiny_params(cfg), mesh, "float32", dit.keeps_fp32)
    n = int(np.prod(tokens_grid))
    cp = ring * ulysses
    padded = -(-n // cp) * cp
    if unrolled:
        # make_step closes over the module-level ops; swap them for this trace only.
        saved, pred.ops = pred.ops, unrolled_ops()
    try:
        step = jax.jit(
            pred.make_step(cfg, None, mesh, n, 1, 2, False, "auto"),
            out_shardings=NamedSharding(mesh, P(None, CP, None)),
        )
        x = jnp.zeros((1, padded, 64), jnp.float32)
        cos, sin = rope_tables(cfg.attention_head_dim, tokens_grid, token_index=np.arange(padded))
        context = jnp.zeros((2, 512, 32), jnp.float32)
        args = (params, x, np.float32(900.0), np.float32(4.0), context, cos, sin, None, None)
        t0 = time.perf_counter()
        lowered = step.lower(*args)
        t1 = time.perf_counter()
        compiled = lowered.compile()
        t2 = time.perf_counter()
    finally:
        if unrolled:
            pred.ops = saved
    compiled(*args).block_until_ready()
    t3 = time.perf_counter()
    compiled(*args).block_until_ready()
    return t1 - t0, t2 - t1, time.perf_counter() - t3


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", nargs="+", type=int, default=[2, 8, 40])
    p.add_argument("--mesh", nargs=3, type=int, default=[1, 1, 1], metavar=("DP", "RING", "ULYSSES"))
    p.add_argument("--no-unrolled", action="store_true", help="skip the unrolled comparison")
    args = p.parse_args(argv)
    import jax

    print(
        f"JAX {jax.__version__}, {jax.default_backend()} ({jax.device_count()} devices, {os.cpu_count()} cores), "
        f"mesh dp×ring×ulysses = {' × '.join(map(str, args.mesh))}, tiny width (8 heads × 16, FFN 256), "
        f"192 tokens, CFG batch 2, float32; load average {os.getloadavg()[0]:.2f}.\n"
    )
    print("| layers | blocks as | trace + lower s | XLA compile s | one step s |")
    print("|---|---|---|---|---|")
    for layers in args.layers:
        for unrolled in [False] if args.no_unrolled else [False, True]:
            lower, comp, run = compile_seconds(layers, args.mesh, unrolled)
            kind = "Python loop (unrolled)" if unrolled else "one lax.scan"
            print(f"| {layers} | {kind} | {lower:.2f} | {comp:.2f} | {run:.4f} |", flush=True)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
