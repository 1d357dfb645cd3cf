"""What the end-to-end tests share: running `python -m parallel_wan.run` in a subprocess with
the same settings a diffusers reference call gets, and comparing uint8 frames."""

import json
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


def run(out, ckpt, **overrides):
    """Our CLI's frames, sidecar and stderr for a run with `common` settings plus `overrides`."""
    proc = run_cli(out, *common(ckpt, **overrides))
    return {"frames": np.load(out / "frames.npy"), "sidecar": json.loads((out / "video.json").read_text()),
            "stderr": proc.stderr}


def write_png(path, width, height):
    """A smooth, deterministic RGB picture (Lanczos resizing of pure noise would be all ringing)."""
    from PIL import Image

    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    rgb = np.stack([xx / width, yy / height, 0.5 + 0.5 * np.sin(xx / 5.0) * np.cos(yy / 7.0)], axis=-1)
    Image.fromarray(np.round(rgb * 255.0).astype(np.uint8)).save(path)
    return str(path)


def tiny_checkpoint(kind, tmp_path_factory):
    """The tiny model of this kind and the diffusers-layout checkpoint folder written from it."""
    from parallel_wan.builtin.tiny import build_tiny, write_checkpoint

    model = build_tiny(kind, seed=0)
    return model, str(write_checkpoint(model, tmp_path_factory.mktemp(kind) / "diffusers", "diffusers"))


def reference_frames(model, image=None, steps=STEPS, scheduler=None, cfg_on=None, **guidance):
    """diffusers' frames (uint8) for the tiny model; I2V pipeline when an image is given. The
    pipeline uses the model's own transformers, so caches enabled on them apply. `scheduler`:
    another than the checkpoint's UniPC; `cfg_on`: whether every step runs CFG (None: diffusers'
    rule, guidance_scale > 1 — it decides once per run, not per expert)."""
    import torch
    from diffusers import UniPCMultistepScheduler, WanImageToVideoPipeline, WanPipeline
    from PIL import Image

    components = dict(
        tokenizer=model.tokenizer, text_encoder=model.text_encoder, vae=model.vae,
        scheduler=scheduler or UniPCMultistepScheduler.from_config(model.scheduler_config),
        transformer=model.transformer, transformer_2=model.transformer_2, boundary_ratio=model.boundary_ratio,
        expand_timesteps=model.kind == "ti2v",
    )
    pipeline = WanPipeline if image is None else WanImageToVideoPipeline
    if cfg_on is not None:
        pipeline = type(pipeline.__name__, (pipeline,), {"do_classifier_free_guidance": property(lambda _: cfg_on)})
    call = dict(prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=NUM_FRAMES,
                num_inference_steps=steps, max_sequence_length=512, output_type="np",
                generator=torch.Generator("cpu").manual_seed(SEED), **guidance)
    if image is None:
        pipe = pipeline(**components)
    else:
        # Wan 2.2 has no CLIP image branch
        pipe = pipeline(**components, image_encoder=None, image_processor=None)
        with Image.open(image) as im:
            call["image"] = im.convert("RGB")
    pipe.set_progress_bar_config(disable=True)
    with torch.no_grad():
        return to_uint8(pipe(**call).frames[0])
