"""How far each mesh's bfloat16 video is from the one-device bf16 video and from the fp32 reference:

    OMP_NUM_THREADS=1 python benchmarks/bf16_meshes.py [meshes=a,b,…] [key=value …]

Renders the built-in tiny model (the CLI's defaults unless overridden: 128×128×17, 10 steps) on
one device in float32 (the reference) and in bfloat16, then in bfloat16 on each mesh, every rank
a gloo process on this machine (one thread each) — with `backend=jax`, one process
and 8 virtual CPU devices — and prints each mesh's distance to one-device
bf16 and to fp32: the final latents' relative L2 error and, on the uint8 frames, the largest
difference in levels, the share of values that differ and the mean difference. Meshes (name →
world size and overrides; the tiny model's 8 heads allow Ulysses up to 8):
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# backend=jax: the meshes run on 8 virtual CPU devices; JAX reads the flag when it is imported
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from benchmarks.compile_precision import distance  # noqa: E402

MESHES = {
    "cp2": (2, ["mesh=cp2"]),  # Ulysses 2
    "ring2": (2, ["mesh=cp2", "mesh.ulysses=1", "mesh.ring=2"]),
    "dp2": (2, ["mesh=dp2"]),  # CFG parallel
    "ulysses4": (4, ["mesh=ulysses4"]),
    "ring4": (4, ["mesh=ring4"]),
    "cp4": (4, ["mesh=cp4"]),  # Ulysses 2 × ring 2
    "dp2_cp2": (4, ["mesh=dp2_cp2"]),  # CFG parallel × Ulysses 2
    "dp2_ring2": (4, ["mesh=dp2_cp2", "mesh.ulysses=1", "mesh.ring=2"]),
    "ulysses8": (8, ["mesh=ulysses8"]),
    "ring8": (8, ["mesh=ring8"]),
    "cp8": (8, ["mesh=cp8"]),  # Ulysses 4 × ring 2
    "dp2_cp4": (8, ["mesh=dp2_cp4"]),  # CFG parallel × Ulysses 2 × ring 2
}
__doc__ += "".join(f"\n  {name:10s} {world} ranks  {' '.join(o)}" for name, (world, o) in MESHES.items()) + "\n"


def render_on_rank(rank: int, world_size: int, overrides: list[str]):
    """One rank's part of a tiny generation; rank 0 returns (latents, uint8 frames)."""
    from benchmarks.tiny_generation import generate_on_rank

    _, gen = generate_on_rank(rank, world_size, overrides)
    return (gen.latents, gen.frames) if rank == 0 else None


def render_on_jax(world_size: int, overrides: list[str]):
    """A tiny generation on JAX in this process, the mesh over `world_size` of its 8 CPU devices."""
    from benchmarks.tiny_generation import compose_spec
    from parallel_wan.backends import make_backend
    from parallel_wan.pipeline import generate

    spec = compose_spec(overrides, world_size)
    gen = generate(spec, make_backend(spec))
    return gen.latents, gen.frames


def main(argv: list[str]) -> None:
    from processes.gloo_ranks import RankPool

    names, overrides = list(MESHES), []
    for arg in argv:
        if arg.startswith("meshes="):
            names = arg.removeprefix("meshes=").split(",")
        else:
            overrides.append(arg)
    unknown = [n for n in names if n not in MESHES]
    if unknown:
        print(
            f"meshes={','.join(unknown)}: not a mesh of this benchmark; pick from {','.join(MESHES)}", file=sys.stderr
        )
        sys.exit(2)
    jax = "backend=jax" in overrides  # one process, 8 virtual CPU devices; else torch on gloo ranks
    pool = RankPool(threads_per_rank=1)
    renders = {}
    try:
        for name, world, mesh, dtype in [
            ("fp32", 1, [], "float32"),
            ("single", 1, [], "bfloat16"),
            *[(n, *MESHES[n], "bfloat16") for n in names],
        ]:
            t0 = time.perf_counter()
            settings = [*overrides, *mesh, f"dtype={dtype}"]
            renders[name] = (
                render_on_jax(world, settings) if jax else pool.run(render_on_rank, world, settings, timeout_s=1800)[0]
            )
            print(f"{name:10s} rendered in {time.perf_counter() - t0:6.1f} s", flush=True)
    finally:
        pool.close()
    print(f"\ntiny model, bfloat16, {' '.join(overrides) or 'CLI defaults'}; frames {renders['fp32'][1].shape}")
    print(f"{'single':10s} vs fp32:   {distance(renders['single'], renders['fp32'])}")
    for name in names:
        print(f"{name:10s} vs single: {distance(renders[name], renders['single'])}")
        print(f"{'':10s} vs fp32:   {distance(renders[name], renders['fp32'])}")


if __name__ == "__main__":
    main(sys.argv[1:])
