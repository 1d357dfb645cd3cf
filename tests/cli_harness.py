"""What the end-to-end tests share: running `python -m parallel_wan.run` in a subprocess with
the same settings a diffusers reference call gets, and comparing uint8 frames."""

import os
import subprocess
import sys

import numpy as np

from parallel_wan.run import CONF_DIR

REPO = os.path.dirname(CONF_DIR)
PROMPT = "a cat runs on the beach at sunset"
NEGATIVE = "blurred static ugly"
SEED = 1234
STEPS, NUM_FRAMES, HEIGHT, WIDTH = 4, 9, 64, 64
# uint8 frames: fp32 end to end, the two pipelines differ by ~1e-6 relative in the latents
# (reduction order); after 4 steps and the VAE that can flip a rounding, so ±2 levels.
MAX_ABS = 2


def run_cli(out, *overrides):
    proc = subprocess.run(
        [sys.executable, "-m", "parallel_wan.run", f"output_dir={out}", *overrides],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": REPO},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def common(ckpt, **extra):
    """Hydra overrides for a small fp32 run that saves its frames."""
    args = dict(checkpoint_dir=ckpt, prompt=PROMPT, negative_prompt=NEGATIVE, seed=SEED, steps=STEPS,
                num_frames=NUM_FRAMES, height=HEIGHT, width=WIDTH, dtype="float32", save_frames="true")
    args.update(extra)
    return [f"{k}={v}" if " " not in str(v) else f"{k}='{v}'" for k, v in args.items()]


def to_uint8(video):
    """diffusers' output_type="np" frames in [0, 1] → uint8, rounded as our pipeline rounds."""
    return np.round(np.clip(video, 0.0, 1.0) * 255.0).astype(np.uint8)


def assert_frames_close(ours, ref, max_abs=MAX_ABS):
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    diff = np.abs(ours.astype(np.int16) - ref.astype(np.int16))
    assert diff.max() <= max_abs, f"max abs diff {diff.max()}, mean {diff.mean():.4f}"
