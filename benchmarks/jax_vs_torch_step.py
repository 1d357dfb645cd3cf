"""Per-step time of the guided noise prediction on CPU: the JAX backend (one compiled program)
against the PyTorch backend (eager), same weights, same inputs, one device, float32.

A step is what the denoising loop asks of the backend: the forward on the CFG batch of 2
(cond, uncond) and the guidance combine, through each backend's own predictor
(backends/*/predictor.py). Two model sizes at random weights:

- tiny: the built-in tiny model's transformer (8 heads × 16, FFN 256, 2 layers), 320 tokens
  (the default 128×128×17 run);
- mid: 12 heads × 64 (dim 768), FFN 3072, 4 layers, 1,000 tokens.

JAX's time excludes compilation (reported apart). Medians and bests of --repeats calls after
two warm-ups, PyTorch first, then JAX.

    python -m benchmarks.jax_vs_torch_step
    python -m benchmarks.jax_vs_torch_step --sizes tiny --repeats 20
    python -m benchmarks.jax_vs_torch_step --threads 1     # one thread each: no thread-pool waits

With two threads on two cores that other work also uses, every eager torch op waits at an
OpenMP barrier for a thread the OS has parked (measured: the tiny step 0.04 s with one thread,
0.2–1 s with two at load average 8); one compiled XLA program has far fewer such waits. Run
both thread settings, and read them next to the load average printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

SIZES = {
    # name: (heads, head_dim, ffn, layers, latent (frames, height, width))
    "tiny": (8, 16, 256, 2, (5, 16, 16)),
    "mid": (12, 64, 3072, 4, (10, 20, 20)),
}


def task_for(backend, cfg, params, latent, work):
    from parallel_wan.models import transformer as dit
    from parallel_wan.pipeline.denoise import DenoiseTask

    if backend.name == "torch":
        import torch

        from parallel_wan.weights.tree import map_leaves

        params = map_leaves(lambda name, a: torch.from_numpy(a), params)
    rng = np.random.default_rng(1)
    context = backend.to_device(rng.standard_normal((2, 512, cfg.text_dim)).astype(np.float32))
    grid = dit.patch_grid(cfg, (1, cfg.out_channels) + latent)
    return DenoiseTask(
        {"single": (cfg, backend.place(params, "float32", dit.keeps_fp32))},
        context,
        1,
        work,
        grid,
        uses_guidance=True,
        per_token_timestep=False,
    )


def timed(fn, repeats: int) -> list[float]:
    for _ in range(2):  # warm-up: allocator, kernel choice
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def measure(size: str, repeats: int) -> dict:
    import jax
    import torch

    from parallel_wan.backends.jax.backend import JaxBackend
    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.models.transformer_config import TransformerConfig
    from parallel_wan.parallel.shards import SequenceShards
    from parallel_wan.pipeline.local_work import RankWork

    from .jax_compile import tiny_params

    heads, head_dim, ffn, layers, latent = SIZES[size]
    cfg = TransformerConfig(
        num_attention_heads=heads,
        attention_head_dim=head_dim,
        in_channels=16,
        out_channels=16,
        text_dim=32,
        freq_dim=32,
        ffn_dim=ffn,
        num_layers=layers,
    )
    params = tiny_params(cfg)
    tokens = int(np.prod(latent)) // 4
    shards = SequenceShards(tokens, 1)
    x = np.random.default_rng(2).standard_normal((1, tokens, 64)).astype(np.float32)

    # One backend after the other, not interleaved: each runtime's idle worker threads spin
    # for a while after a call, and interleaving made torch's steps ~10× slower here.
    tb = start_torch_backend("cpu")
    t_pred = tb.noise_predictor(task_for(tb, cfg, params, latent, RankWork(shards, 0, (0,), None)))
    tx = tb.to_device(x)

    def torch_step():
        with torch.inference_mode():
            return t_pred("single", tx, 900.0, 4.0)

    times = {"torch": timed(torch_step, repeats)}
    torch_out = tb.to_host(torch_step())

    jb = JaxBackend()
    j_pred = jb.noise_predictor(task_for(jb, cfg, params, latent, RankWork(shards, None, (0,), None)))
    jx = j_pred.shard(jb.to_device(x))
    t0 = time.perf_counter()
    j_pred.compile(jx)
    compile_s = time.perf_counter() - t0

    def jax_step():
        return jax.block_until_ready(j_pred("single", jx, 900.0, 4.0))

    times["jax"] = timed(jax_step, repeats)
    jax_out = jb.to_host(jax_step())
    err = float(np.linalg.norm(jax_out - torch_out) / np.linalg.norm(torch_out))
    return {
        "size": size,
        "cfg": cfg,
        "tokens": tokens,
        "compile": compile_s,
        "rel_err": err,
        **{f"{k}_median": statistics.median(v) for k, v in times.items()},
        **{f"{k}_best": min(v) for k, v in times.items()},
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="1: torch.set_num_threads(1) and XLA without its Eigen thread pool (default: both use every core)",
    )
    args = p.parse_args(argv)
    if args.threads == 1:  # before JAX starts its CPU client
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        ).strip()
    import jax
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    print(
        f"CPU, {os.cpu_count()} cores (torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"JAX {jax.__version__}); {args.repeats} calls each after 2 warm-ups; load average "
        f"{os.getloadavg()[0]:.2f}.\n"
    )
    print(
        "| model | dim × layers | tokens | PyTorch step s (median / best) | JAX step s (median / best) "
        "| JAX / PyTorch (best) | JAX compile s | rel. diff |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for size in args.sizes:
        r = measure(size, args.repeats)
        c = r["cfg"]
        print(
            f"| {size} | {c.dim} × {c.num_layers} | {r['tokens']:,} | {r['torch_median']:.4f} / {r['torch_best']:.4f} "
            f"| {r['jax_median']:.4f} / {r['jax_best']:.4f} | {r['jax_best'] / r['torch_best']:.2f}× "
            f"| {r['compile']:.2f} | {r['rel_err']:.1e} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
