"""One rank's part of a generation with the built-in tiny model, configured as the CLI would be.

The spec comes from Hydra's compose over conf/ with `key=value` overrides (what
`python -m parallel_wan.run key=value` sees), so a benchmark runs the same code path as a user.
"""

from __future__ import annotations

from parallel_wan.run import CONF_DIR


def compose_spec(overrides: list[str], world_size: int):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from parallel_wan.config import resolve

    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=list(overrides))
    # Nothing is written: generate() returns the frames and the caller keeps only numbers.
    return resolve(OmegaConf.to_container(cfg, resolve=False) | {"output_dir": "/tmp/unused"}, world_size)


def generate_on_rank(rank: int, world_size: int, overrides: list[str], progress=None):
    """Run the generation; returns (spec, Generation) on this rank. `progress` wraps the
    timestep iterator, as the CLI's progress bar does (a step ends when the next begins)."""
    from parallel_wan.backends.torch.backend import TorchBackend
    from parallel_wan.backends.torch.distributed import Launch
    from parallel_wan.pipeline import generate, preflight

    spec = compose_spec(overrides, world_size)
    ckpt = preflight(spec)
    backend = TorchBackend(spec.device, spec.mesh, Launch(rank, world_size, rank, "benchmark"), spec.dist_timeout_s,
                           spec.attention_impl)
    return spec, generate(spec, backend, ckpt, progress)
