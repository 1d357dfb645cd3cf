"""Step caching on CPU: a dense denoising loop against each cache, in one run, on a transformer
big enough that the blocks are the work (dim 1024 = 16 heads × 64, FFN 4096, 8 layers, two
experts as in A14B, CFG batch of 2, float32, random weights), 40 steps.

For each cache the table gives the fraction of block forwards it ran (hardware-independent: the
work the cache saved) next to the fraction of wall time the loop took. Their ratio is the
cache's own cost: 1.00 means the loop got exactly as much faster as the work it skipped; above
1 is what the cache adds (embeddings and output head that still run on a skipped step, the
First-Block Cache's block 0 and its metric, TaylorSeer's prediction, the residual adds).

    python -m benchmarks.caching
    python -m benchmarks.caching --steps 20 --tokens 128 --threads 1

The loop is the production one (pipeline/denoise.py with the torch backend's predictor and
StepCache); only the weights and the conditioning are random. Random weights change fast from
step to step, so First-Block Cache needs a high threshold to skip at all; the MagCache curve is
the official T2V-A14B one (schedule-driven: it skips the same steps on any weights).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

CACHES = {
    "none": ["cache=none"],
    "magcache": ["cache=magcache"],  # the T2V preset's curve and settings (0.06, K 2)
    "taylorseer": ["cache=taylorseer"],  # interval 5, warm-up 3, order 1
    "fbcache": ["cache=fbcache", "cache.threshold=0.5"],
}


def build(tokens: int, layers: int):
    import torch

    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.models import transformer as dit
    from parallel_wan.models.transformer_config import TransformerConfig
    from parallel_wan.parallel.shards import SequenceShards
    from parallel_wan.parallel.work import RankWork
    from parallel_wan.weights.tree import map_leaves

    from .jax_compile import tiny_params

    cfg = TransformerConfig(
        num_attention_heads=16,
        attention_head_dim=64,
        ffn_dim=4096,
        num_layers=layers,
        in_channels=16,
        out_channels=16,
        text_dim=256,
        freq_dim=256,
    )
    backend = start_torch_backend("cpu")
    params = map_leaves(lambda name, a: torch.from_numpy(a * 0.1), tiny_params(cfg))  # tamer activations
    placed = backend.place(params, "float32", dit.keeps_fp32)
    latent = (1, 16, 2, 2 * 4, 2 * tokens // 8)  # (B, C, T, H, W): T·H·W / 4 patches = tokens
    grid = dit.patch_grid(cfg, latent)
    rng = np.random.default_rng(1)
    context = backend.to_device(rng.standard_normal((2, 64, cfg.text_dim)).astype(np.float32))
    x = backend.to_device(rng.standard_normal((1, tokens, 64)).astype(np.float32))
    work = RankWork(SequenceShards(tokens, 1), 0, (0,), None)
    return cfg, backend, {"high_noise": (cfg, placed), "low_noise": (cfg, placed)}, context, grid, work, x


def run_loop(kind: str, steps: int, built) -> dict:
    import torch

    from benchmarks.tiny_generation import compose_spec
    from parallel_wan.pipeline.denoise import DenoiseTask, denoise
    from parallel_wan.pipeline.steps import step_cache_plan, step_plan
    from parallel_wan.sampling import make_schedule

    cfg, backend, experts, context, grid, work, x = built
    spec = compose_spec([f"steps={steps}", "dtype=float32", *CACHES[kind]], 1)
    schedule = make_schedule("official", steps, spec.sampling.shift)

    class NoScheduler:
        scheduler_config = None

    plan = step_cache_plan(spec, NoScheduler(), step_plan(spec, schedule))
    task = DenoiseTask(
        experts,
        context,
        1,
        work,
        grid,
        uses_guidance=True,
        per_token_timestep=False,
        cache=spec.cache if spec.cache.on else None,
        cache_plan=plan,
    )
    predict = backend.noise_predictor(task)
    with torch.inference_mode():
        t0 = time.perf_counter()
        state = denoise(spec, schedule, x.clone(), predict, lambda it: it, backend.ops)
        seconds = time.perf_counter() - t0
    record = predict.cache_report() or {
        "block_forwards": 2 * steps * cfg.num_layers,
        "block_forwards_dense": 2 * steps * cfg.num_layers,
        "skipped": {"cond": [], "uncond": []},
    }
    # Per branch: the dense count is steps × layers for each of cond and uncond.
    return {"kind": kind, "seconds": seconds, "latents": state.latents.numpy().copy(), "record": record}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--tokens", type=int, default=64, help="patch tokens (a multiple of 8)")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--caches", nargs="+", default=list(CACHES))
    args = p.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    built = build(args.tokens, args.layers)
    run_loop("none", 2, built)  # warm-up: allocator, thread pool
    results = [run_loop(kind, args.steps, built) for kind in ["none", *[c for c in args.caches if c != "none"]]]
    dense = results[0]
    print(
        f"# {args.steps} steps, {args.tokens} tokens × CFG 2, dim 1024, FFN 4096, {args.layers} layers, two "
        f"experts, float32, {torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}"
    )
    print(
        "| cache | skipped steps (cond) | block forwards | wall s | wall / dense | work / dense | "
        "overhead (wall ratio ÷ work ratio) | latents rel. diff vs dense |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        rec = r["record"]
        work = rec["block_forwards"] / rec["block_forwards_dense"]
        wall = r["seconds"] / dense["seconds"]
        diff = np.linalg.norm(r["latents"] - dense["latents"]) / np.linalg.norm(dense["latents"])
        print(
            f"| {r['kind']} | {len(rec['skipped']['cond'])} | {rec['block_forwards']}/{rec['block_forwards_dense']} "
            f"| {r['seconds']:.1f} | {wall:.3f} | {work:.3f} | {wall / work:.3f} | {diff:.3g} |"
        )


if __name__ == "__main__":
    main()
