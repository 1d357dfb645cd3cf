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


def run(spec: RunSpec, ckpt=None) -> dict:
    """Generate and write outputs; returns the paths written."""
    from . import __version__
    from .backends.torch.backend import TorchBackend
    from .outputs import save_generation
    from .pipeline import generate

    backend = TorchBackend(spec.device)
    log.info("model=%s task=%s %dx%d×%d frames, %d steps, dtype=%s, device=%s", spec.model.name, spec.model.task,
             spec.width, spec.height, spec.num_frames, spec.steps, spec.dtype, backend.device)
    gen = generate(spec, backend, ckpt, progress=progress_bar(spec.steps, enabled=True))
    sidecar = {
        "parallel_wan": __version__,
        "config": spec.to_dict(),
        "seed": spec.seed,
        "timings_s": gen.timings,
        **gen.info,
        "frames_shape": list(gen.frames.shape),
    }
    paths = save_generation(spec.output_dir, gen.frames, spec.model.fps, sidecar, spec.save_frames)
    print(gen_summary(gen, paths), file=sys.stderr)
    return paths


def gen_summary(gen, paths) -> str:
    from .timing import timing_summary

    phases = {k: v for k, v in gen.timings.items() if k != "total"}
    return timing_summary(phases, gen.timings["total"], {"video": paths["video"]})


@hydra.main(config_path=CONF_DIR, config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    setup_logging()
    try:
        spec = resolve(OmegaConf.to_container(cfg, resolve=True))
        from .pipeline import preflight

        ckpt = preflight(spec)
    except ConfigError as exc:
        print(f"parallel_wan: error: {exc}", file=sys.stderr)
        sys.exit(2)
    run(spec, ckpt)


if __name__ == "__main__":
    main()
