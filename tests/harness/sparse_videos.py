"""Tiny videos with sparse attention (sparse=radial or svg) on one rank of a gloo mesh, for
harness.ranks.run_on_ranks and for the one-device references the mesh tests compare with."""


def sparse_video(rank, world, overrides):
    """One rank's part of a tiny generation → (latents, the sidecar's "sparse") on rank 0, None
    elsewhere."""
    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.config.compose import compose_spec
    from parallel_wan.launch import Launch
    from parallel_wan.pipeline import generate, preflight

    spec = compose_spec(list(overrides), world, output_dir="/tmp/unused")
    backend = start_torch_backend(spec.execution.device, spec.mesh, Launch(rank, world, rank, "test"))
    gen = generate(spec, backend, preflight(spec))
    return (gen.latents, gen.info.get("sparse")) if rank == 0 else None
