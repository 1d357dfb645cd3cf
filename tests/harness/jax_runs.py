"""Runs on the JAX backend as the JAX tests make them: a generation with its compile log and the
loop's compile window (the decoder that decodes nothing is harness.no_decode)."""

import jax

from harness.no_decode import NoDecode
from parallel_wan.backends import make_backend
from parallel_wan.backends.jax.compile_log import CompileLog
from parallel_wan.config.compose import compose_settings
from parallel_wan.run import validate_job

BASE = ["dtype=float32", "steps=3", "num_frames=9", "seed=3", "prompt='a dog jumps'", "height=48", "width=48"]


STEP = "jit(noise_prediction_step)"


def raw_config(overrides) -> dict:
    return compose_settings(list(overrides)) | {"output_dir": "/tmp/unused"}


class Window:
    """A progress wrapper that notes how many compilations had happened when the loop began
    and ended."""

    def __init__(self, log: CompileLog):
        self.log, self.at_start, self.at_end = log, None, None

    def __call__(self, timesteps):
        self.at_start = len(self.log.events)
        yield from timesteps
        self.at_end = len(self.log.events)


def generate(overrides, decode=True, monkeypatch=None, setup=None):
    from parallel_wan.pipeline import generate as run_generation

    backend_jax = "backend=jax" in overrides
    job, ckpt = validate_job(raw_config(overrides), jax.device_count() if backend_jax else 1)
    spec = job.base
    backend = make_backend(spec)
    if not decode:
        monkeypatch.setattr(backend, "video_decoder", lambda params, cfg: NoDecode())
    if setup is not None:
        setup(backend)
    with CompileLog() as log:
        window = Window(log)
        gen = run_generation(spec, backend, ckpt, progress=window)
    return gen, log, window
