"""video= (video-to-video, what a server's remix and edits run) renders the frames diffusers'
WanVideoToVideoPipeline renders from the same tiny checkpoint, source video, prompt, strength and
seed. diffusers' pipeline has one transformer: the boundary puts every step run on the tiny
model's low-noise expert, which is then the pipeline's transformer."""

import json

import numpy as np
import pytest
from harness.cli import common, run_in_process
from harness.diffusers_reference import v2v_frames
from harness.frames import assert_frames_close
from harness.videos import write_source_video


@pytest.mark.parametrize("strength", [0.5, 0.75])
def test_video_to_video_matches_diffusers(tiny_t2v, tmp_path, strength):
    model, ckpt = tiny_t2v.model, tiny_t2v.diffusers
    frames = write_source_video(tmp_path / "source.mp4")
    out = tmp_path / "ours"
    # boundary 0.999: every step run (t < 999) is the low-noise expert's, guided by guidance_low
    run_in_process(
        out, *common(ckpt, video=tmp_path / "source.mp4", strength=strength, boundary=0.999, guidance_low=3.0)
    )
    ref = v2v_frames(model, frames, strength, 3.0)
    assert_frames_close(np.load(out / "frames.npy"), ref, max_abs=2)
    sidecar = json.loads((out / "video.json").read_text())
    assert sidecar["config"]["strength"] == strength and sidecar["config"]["video"].endswith("source.mp4")
    # the source matters: not the text-to-video run of the same seed (the tiny random VAE keeps
    # too little of a picture for "nearer to the source" to be measurable)
    t2v = tmp_path / "t2v"
    run_in_process(t2v, *common(ckpt, boundary=0.999, guidance_low=3.0))
    ours, plain = np.load(out / "frames.npy").astype(int), np.load(t2v / "frames.npy").astype(int)
    assert np.abs(ours - plain).max() > 8


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_video_to_video_with_a_lora_matches_diffusers(tiny_t2v, tmp_path):
    """A LoRA on the expert that runs (PEFT file, alpha ≠ rank, scale 0.5): diffusers'
    WanVideoToVideoPipeline after load_lora_weights + set_adapters, within 2 levels; the LoRA
    moves the frames far more than that."""
    from harness.lora_files import lora_pairs, write_lora

    from parallel_wan.builtin.tiny import transformer_config

    model, ckpt = tiny_t2v.model, tiny_t2v.diffusers
    frames = write_source_video(tmp_path / "source.mp4")
    lora = write_lora(tmp_path / "low.safetensors", lora_pairs(transformer_config("t2v"), rank=8, seed=2), "peft", 4.0)
    settings = dict(video=tmp_path / "source.mp4", strength=0.75, boundary=0.999, guidance_low=3.0)
    run_in_process(tmp_path / "ours", *common(ckpt, **settings, lora_low=lora, lora_low_scale=0.5))
    ours = np.load(tmp_path / "ours" / "frames.npy")
    assert_frames_close(ours, v2v_frames(model, frames, 0.75, 3.0, lora=(lora, 0.5)), max_abs=2)
    run_in_process(tmp_path / "plain", *common(ckpt, **settings))
    assert np.abs(ours.astype(int) - np.load(tmp_path / "plain" / "frames.npy")).max() > 20  # the LoRA mattered


@pytest.mark.parametrize("kind", ["i2v", "ti2v"])
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_video_to_video_with_a_first_frame_matches_diffusers_pieces(kind, tmp_path_factory, tmp_path):
    """video= with image= (a remix of an image-to-video job): the source noised as
    WanVideoToVideoPipeline noises it, then WanImageToVideoPipeline's loop from there with the
    image as its condition (harness: image_v2v_frames) — I2V-A14B's channel condition, TI2V-5B's
    held first frame. Both the source and the image matter."""
    from harness.cli import HEIGHT, WIDTH, run
    from harness.diffusers_reference import image_v2v_frames, tiny_checkpoint
    from harness.images import write_png

    model, ckpt = tiny_checkpoint(kind, tmp_path_factory)
    frames = write_source_video(tmp_path / "source.mp4")
    image = write_png(tmp_path / "first.png", WIDTH, HEIGHT)
    high, low = (3.5, 3.0) if kind == "i2v" else (5.0, 5.0)
    guidance = dict(guidance_scale=high) | (dict(guidance_scale_2=low) if kind == "i2v" else {})
    settings = dict(model=f"tiny_{kind}", guidance_high=high, guidance_low=low, strength=0.75)
    ours = run(tmp_path / "ours", ckpt, **settings, image=image, video=tmp_path / "source.mp4")
    assert_frames_close(ours["frames"], image_v2v_frames(model, image, frames, 0.75, **guidance), max_abs=2)
    plain = run(tmp_path / "plain", ckpt, **settings, image=image)  # the same image, no source
    assert np.abs(ours["frames"].astype(int) - plain["frames"]).max() > 8
    other = write_png(tmp_path / "other.png", 96, 72)  # another picture once resized
    moved = run(tmp_path / "moved", ckpt, **settings, image=other, video=tmp_path / "source.mp4")
    assert np.abs(ours["frames"].astype(int) - moved["frames"]).max() > 8
