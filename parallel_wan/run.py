"""Entry point: `python -m parallel_wan.run [key=value ...]` (Hydra overrides, see conf/config.yaml).

Order matters for users: validate every setting and the checkpoint's json/headers first (one
line and exit code 2 on a bad value, nothing written), then load, generate, and write the mp4
and its JSON sidecar atomically, then print the TIMING SUMMARY.
"""

from __future__ import annotations

import logging
import os
import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from .config import ConfigError, RunSpec, resolve

log = logging.getLogger("parallel_wan")
CONF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")


def setup_logging(rank: int = 0, all_ranks: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s %(levelname)s] %(message)s", "%H:%M:%S"))
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(logging.INFO if rank == 0 or all_ranks else logging.WARNING)


def progress_bar(total: int, enabled: bool):
    from tqdm.auto import tqdm

    def wrap(iterable):
        return tqdm(iterable, total=total, desc="denoise", unit="step", disable=not enabled, file=sys.stderr)

    return wrap


def run(spec: RunSpec, ckpt=None, launch=None) -> dict | None:
    """Generate and, on the main rank, write outputs; returns the paths written (None on
    other ranks)."""
    from . import __version__
    from .backends.torch.backend import TorchBackend
    from .outputs import save_generation
    from .pipeline import generate

    backend = TorchBackend(spec.device, spec.mesh, launch, spec.dist_timeout_s, spec.attention_impl)
    log.info("model=%s task=%s %dx%d×%d frames, %d steps, dtype=%s, device=%s, mesh=%s (%d process%s)",
             spec.model.name, spec.model.task, spec.width, spec.height, spec.num_frames, spec.steps, spec.dtype,
             backend.device, spec.mesh.name, spec.mesh.world_size, "" if spec.mesh.world_size == 1 else "es")
    gen = generate(spec, backend, ckpt, progress=progress_bar(spec.steps, enabled=backend.is_main))
    if not backend.is_main:
        return None
    sidecar = {
        "parallel_wan": __version__,
        "config": spec.to_dict(),
        "seed": spec.seed,
        "timings_s": gen.timings,
        **gen.info,
        "frames_shape": list(gen.frames.shape),
    }
    paths = save_generation(spec.output_dir, gen.videos, spec.model.fps, sidecar, spec.save_frames)
    print(gen_summary(gen, paths), file=sys.stderr)
    return paths


def gen_summary(gen, paths) -> str:
    from .timing import timing_summary

    phases = {k: v for k, v in gen.timings.items() if k != "total"}
    where = paths["video"] if len(paths["videos"]) == 1 else f"{len(paths['videos'])} videos in {os.path.dirname(paths['video'])}"
    return timing_summary(phases, gen.timings["total"], {"video": where})


@hydra.main(config_path=CONF_DIR, config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    from .backends.torch.distributed import launch_from_env, shutdown

    launch = launch_from_env()
    setup_logging(launch.rank, bool(cfg.get("log_all_ranks")))
    try:
        spec = resolve(OmegaConf.to_container(cfg, resolve=True), launch.world_size)
        from .pipeline import preflight

        ckpt = preflight(spec)
    except ConfigError as exc:
        # Every rank validates the same settings and stops here, before any process group
        # exists, so nobody waits on anybody; one rank says why.
        if launch.rank == 0:
            print(f"parallel_wan: error: {exc}", file=sys.stderr)
        sys.exit(2)
    try:
        run(spec, ckpt, launch)
    except Exception as exc:
        if launch.world_size == 1:
            raise
        # A failing rank must end the job, not leave its peers blocked in a collective: say
        # which rank failed and why, then exit without waiting on a clean group teardown. Its
        # peers' collectives then fail (peer gone) or time out after dist_timeout_s, and they
        # exit through this same path.
        print(f"parallel_wan: rank {launch.rank}/{launch.world_size} failed: {type(exc).__name__}: {exc}",
              file=sys.stderr, flush=True)
        os._exit(1)
    shutdown()


if __name__ == "__main__":
    main()
