"""Per-denoising-step wall time on CPU for each mesh preset, against one process, in one run.

Each preset runs a whole generation of the built-in tiny T2V model (8 heads of 16, 2 layers,
float32) on gloo processes; the figures come from the denoise phase. On this 2-core machine
the processes share the same two cores, so no preset can be faster than one process using
both: the ratio shows what the parallel scheme costs (gloo over loopback, the extra copies,
smaller matmuls, processes taking turns on the cores), not the speed-up it gives on GPUs.

    python -m benchmarks.cpu_step                              # world ≤ 4, then the 8-rank presets
    python -m benchmarks.cpu_step --presets cp2 ring4 --repeats 1 --overrides height=128 width=128 num_frames=17

The VAE decode runs after the denoise phase, on rank 0 alone, and at 320×320×33 it takes
longer than all the steps together, so it is skipped unless --decode is given.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from .comm_volume import load_preset

PRESETS = ("cp2", "dp2", "cp4", "ulysses4", "ring4", "usp2x2", "dp2_cp2", "cp8", "ulysses8", "ring8", "dp2_cp4")
# 320×320 pixels, 33 frames → 9 latent frames × 20 × 20 patches = 3,600 tokens: divisible by
# cp 2, 4 and 8, and enough that attention (N² work) dominates a step of the tiny model.
SIZE = ["height=320", "width=320", "num_frames=33"]


def step_times_on_rank(rank: int, world: int, overrides: list[str], decode: bool) -> dict:
    from .tiny_generation import generate_on_rank

    stamps: list[tuple[float, float]] = []

    def progress(timesteps):
        for t in timesteps:
            stamps.append((time.perf_counter(), time.process_time()))
            yield t
        stamps.append((time.perf_counter(), time.process_time()))

    # Without --decode the decode (after the timed phase) is skipped: at 320×320×33 it takes
    # longer than all the steps together.
    spec, gen = generate_on_rank(rank, world, overrides, progress, decode=decode)
    pairs = list(zip(stamps, stamps[1:]))
    return {
        "steps": [b[0] - a[0] for a, b in pairs],
        "cpu": [b[1] - a[1] for a, b in pairs],
        "denoise": gen.timings["denoise"],
        "tokens": gen.info["mesh"]["tokens"],
        "tokens_per_rank": gen.info["mesh"]["tokens_per_rank"],
    }


def run_preset(name: str, overrides: list[str], decode: bool, cores: int, threads: int | None = None) -> dict:
    from processes.gloo_ranks import spawn_ranks

    spec = load_preset(name)
    threads = threads or max(1, cores // spec.world_size)
    ranks = spawn_ranks(
        step_times_on_rank,
        spec.world_size,
        overrides + [f"mesh={name}"],
        decode,
        threads_per_rank=threads,
        timeout_s=900,
    )
    steps = ranks[0]["steps"]
    return {
        "name": name,
        "spec": spec,
        "threads": threads,
        "tokens": ranks[0]["tokens"],
        "tokens_per_rank": ranks[0]["tokens_per_rank"],
        # Ranks meet in every layer's collectives, so rank 0's steps are the mesh's steps. The
        # first step also pays one-time costs (kernel choice, allocator warm-up): left out.
        "median_step": statistics.median(steps[1:] if len(steps) > 1 else steps),
        # CPU seconds all ranks spent per step: the work, whatever else shares the cores.
        "cpu_step": sum(statistics.median(r["cpu"][1:] if len(r["cpu"]) > 1 else r["cpu"]) for r in ranks),
        "denoise_per_step": max(r["denoise"] for r in ranks) / len(steps),
    }


def best_of(runs: list[dict]) -> dict:
    """The fastest repeat: other work on a shared machine only ever adds time."""
    return min(runs, key=lambda r: r["median_step"])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--presets", nargs="+", default=list(PRESETS))
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--repeats", type=int, default=2, help="run the whole list this many times; keep each preset's best")
    p.add_argument("--decode", action="store_true", help="run the real VAE decode after the timed steps")
    p.add_argument("--overrides", nargs="+", default=SIZE, help="Hydra overrides for the size (default: %(default)s)")
    args = p.parse_args(argv)
    cores = os.cpu_count() or 1
    overrides = ["model=tiny", "dtype=float32", "device=cpu", "seed=0", f"steps={args.steps}", *args.overrides]
    load_before = os.getloadavg()
    runs: dict[str, list[dict]] = {}
    t0 = time.perf_counter()
    for _ in range(args.repeats):
        # The baselines run in every repeat, next to the presets, so the ratio compares runs
        # made under the same background load.
        runs.setdefault("single", []).append(run_preset("single", overrides, args.decode, cores))
        runs.setdefault("single, 1 thread", []).append(run_preset("single", overrides, args.decode, cores, threads=1))
        for name in args.presets:
            runs.setdefault(name, []).append(run_preset(name, overrides, args.decode, cores))
    best = {k: best_of(v) for k, v in runs.items()}
    base = best["single"]["median_step"]
    print(
        f"Tiny T2V ({' '.join(args.overrides)}: {best['single']['tokens']:,} tokens), float32, {args.steps} steps, "
        f"{cores} cores; best of {args.repeats}; load average before {load_before[0]:.2f}, "
        f"after {os.getloadavg()[0]:.2f}; {time.perf_counter() - t0:.0f} s in all.\n"
    )
    print(
        "| preset | processes | dp × (U × R) | threads/process | tokens/rank | median step s | denoise/steps s "
        "| vs one process (2 threads) | CPU s/step, all ranks |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for key, r in best.items():
        s = r["spec"]
        print(
            f"| {key} | {s.world_size} | {s.dp} × ({s.ulysses} × {s.ring}) | {r['threads']} | {r['tokens_per_rank']:,} "
            f"| {r['median_step']:.3f} | {r['denoise_per_step']:.3f} | {r['median_step'] / base:.2f}× "
            f"| {r['cpu_step']:.2f} |"
        )


if __name__ == "__main__":
    main()
