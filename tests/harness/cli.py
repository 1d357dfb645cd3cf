"""Running `python -m parallel_wan.run` in a subprocess with the settings a diffusers reference
call gets (the small fp32 run the end-to-end tests share)."""

import json
import os
import subprocess
import sys

import numpy as np

from harness.paths import REPO

PROMPT = "a cat runs on the beach at sunset"
NEGATIVE = "blurred static ugly"
SEED = 1234
STEPS, NUM_FRAMES, HEIGHT, WIDTH = 4, 9, 64, 64


def run_cli(out, *overrides):
    proc = subprocess.run(
        [sys.executable, "-m", "parallel_wan.run", f"output_dir={out}", *overrides],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def common(ckpt, **extra):
    """Hydra overrides for a small fp32 run that saves its frames."""
    args = dict(
        checkpoint_dir=ckpt,
        prompt=PROMPT,
        negative_prompt=NEGATIVE,
        seed=SEED,
        steps=STEPS,
        num_frames=NUM_FRAMES,
        height=HEIGHT,
        width=WIDTH,
        dtype="float32",
        save_frames="true",
    )
    args.update(extra)
    return [f"{k}={v}" if " " not in str(v) else f"{k}='{v}'" for k, v in args.items()]


def run_in_process(out, *overrides) -> str:
    """What `python -m parallel_wan.run output_dir=OUT …` does after its flags — compose, check
    every setting, run the job — in this process (no interpreter start-up, no imports: seconds
    saved per run where the CLI itself is not what is tested); returns what it logged and
    printed (INFO and up, the TIMING SUMMARY). Tests of the CLI itself use `run_cli`."""
    import contextlib
    import io
    import logging

    from parallel_wan.config.compose import compose_settings
    from parallel_wan.jobs import run_job
    from parallel_wan.run import validate_job

    text = io.StringIO()
    log = logging.getLogger("parallel_wan")
    handler, saved = logging.StreamHandler(text), (log.level, log.propagate)
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        with contextlib.redirect_stderr(text):
            run_job(*validate_job(compose_settings([f"output_dir={out}", *overrides]), 1, env={}))
    finally:
        log.removeHandler(handler)
        log.setLevel(saved[0])
        log.propagate = saved[1]
    return text.getvalue()


def run(out, ckpt, **overrides):
    """Our frames, sidecar and log for a run with `common` settings plus `overrides` (in process)."""
    logged = run_in_process(out, *common(ckpt, **overrides))
    return {
        "frames": np.load(out / "frames.npy"),
        "sidecar": json.loads((out / "video.json").read_text()),
        "stderr": logged,
    }
