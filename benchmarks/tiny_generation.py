"""One rank's part of a generation with the built-in tiny model, configured as the CLI would be.

The spec comes from Hydra's compose over conf/ with `key=value` overrides (what
`python -m parallel_wan.run key=value` sees), so a benchmark runs the same code path as a user.
"""

from __future__ import annotations


def compose_spec(overrides: list[str], world_size: int):
    from parallel_wan.config.compose import compose_spec

    # Nothing is written: generate() returns the frames and the caller keeps only numbers.
    return compose_spec(list(overrides), world_size, output_dir="/tmp/unused")


class _NoDecode:
    """A video decoder that decodes nothing: one black pixel per video on the main rank."""

    def __init__(self, backend):
        self.backend = backend

    def compile(self, latent_shape) -> dict:
        return {}

    def __call__(self, latents):
        import numpy as np

        return (
            [np.zeros((1, 1, 1, 3), np.uint8) for _ in range(latents.shape[0])] if self.backend.writes_outputs else []
        )


def generate_on_rank(rank: int, world_size: int, overrides: list[str], progress=None, comm=None, decode=True):
    """Run the generation; returns (spec, Generation) on this rank. `progress` wraps the
    timestep iterator, as the CLI's progress bar does (a step ends when the next begins).
    comm: the collectives every exchange goes through (default torch.distributed's; counting
    ones measure the traffic). decode=False: the VAE decode is skipped (`_NoDecode`)."""
    from parallel_wan.backends.torch.backend import TorchBackend, start_torch_backend
    from parallel_wan.launch import Launch
    from parallel_wan.pipeline import generate, preflight

    class Backend(TorchBackend):
        def video_decoder(self, vae_params, vae_config):
            return super().video_decoder(vae_params, vae_config) if decode else _NoDecode(self)

    spec = compose_spec(overrides, world_size)
    ckpt = preflight(spec)
    backend = start_torch_backend(
        spec.execution.device,
        spec.mesh,
        Launch(rank, world_size, rank, "benchmark"),
        spec.execution.dist_timeout_s,
        spec.execution.attention_impl,
        comm=comm,
        cls=Backend,
    )
    return spec, generate(spec, backend, ckpt, progress)
