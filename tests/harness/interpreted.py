"""Tiny videos with a Triton attention kernel (attention_impl=sage or fp8) run in Triton's
interpreter, in spawned rank processes (harness.ranks.run_on_ranks(..., preloaded=False)): the
rank sets TRITON_INTERPRET=1 before a kernel module is first imported there."""

TRITON_SETTINGS = ("attention_impl=sage", "attention_impl=fp8")


def interpret_triton() -> None:
    import os

    os.environ["TRITON_INTERPRET"] = "1"  # read when a kernel module is imported (its @triton.jit)


def video(rank, world, overrides):
    """One rank's part of a tiny generation with the settings' attention_impl → (latents, frames,
    the sidecar's "attention") on rank 0, None elsewhere."""
    if any(s in overrides for s in TRITON_SETTINGS):
        interpret_triton()
    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.config.compose import compose_spec
    from parallel_wan.launch import Launch
    from parallel_wan.pipeline import generate, preflight

    spec = compose_spec(list(overrides), world, output_dir="/tmp/unused")
    backend = start_torch_backend(
        spec.execution.device,
        spec.mesh,
        Launch(rank, world, rank, "test"),
        attention_impl=spec.execution.attention_impl,
    )
    gen = generate(spec, backend, preflight(spec))
    return (gen.latents, gen.frames, gen.info["attention"]) if rank == 0 else None
