"""video= (video-to-video, what a server's remix and edits run) renders the frames diffusers'
WanVideoToVideoPipeline renders from the same tiny checkpoint, source video, prompt, strength and
seed. diffusers' pipeline has one transformer: the boundary puts every step run on the tiny
model's low-noise expert, which is then the pipeline's transformer."""

import json

import numpy as np
import pytest
import torch
from harness.cli import HEIGHT, NEGATIVE, PROMPT, SEED, WIDTH, common, run_in_process
from harness.frames import assert_frames_close, to_uint8
from harness.videos import write_source_video


def diffusers_v2v(model, frames, strength, guidance):
    from diffusers import WanVideoToVideoPipeline
    from harness.diffusers_reference import text_and_vae
    from PIL import Image

    pipe = WanVideoToVideoPipeline(**text_and_vae(model), transformer=model.transformer_2)
    pipe.set_progress_bar_config(disable=True)
    with torch.no_grad():
        out = pipe(
            video=[Image.fromarray(f) for f in frames],
            prompt=PROMPT,
            negative_prompt=NEGATIVE,
            height=HEIGHT,
            width=WIDTH,
            num_inference_steps=4,
            strength=strength,
            guidance_scale=guidance,
            max_sequence_length=512,
            generator=torch.Generator("cpu").manual_seed(SEED),
            output_type="np",
        ).frames[0]
    return to_uint8(out)


@pytest.mark.parametrize("strength", [0.5, 0.75])
def test_video_to_video_matches_diffusers(tiny_t2v, tmp_path, strength):
    model, ckpt = tiny_t2v.model, tiny_t2v.diffusers
    frames = write_source_video(tmp_path / "source.mp4")
    out = tmp_path / "ours"
    # boundary 0.999: every step run (t < 999) is the low-noise expert's, guided by guidance_low
    run_in_process(
        out, *common(ckpt, video=tmp_path / "source.mp4", strength=strength, boundary=0.999, guidance_low=3.0)
    )
    ref = diffusers_v2v(model, frames, strength, 3.0)
    assert_frames_close(np.load(out / "frames.npy"), ref, max_abs=2)
    sidecar = json.loads((out / "video.json").read_text())
    assert sidecar["config"]["strength"] == strength and sidecar["config"]["video"].endswith("source.mp4")
    # the source matters: not the text-to-video run of the same seed (the tiny random VAE keeps
    # too little of a picture for "nearer to the source" to be measurable)
    t2v = tmp_path / "t2v"
    run_in_process(t2v, *common(ckpt, boundary=0.999, guidance_low=3.0))
    ours, plain = np.load(out / "frames.npy").astype(int), np.load(t2v / "frames.npy").astype(int)
    assert np.abs(ours - plain).max() > 8
