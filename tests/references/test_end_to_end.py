"""`python -m parallel_wan.run` renders the frames diffusers' Wan pipelines render from the same
tiny checkpoint, prompt and seed."""

import json
import os

import numpy as np
import pytest
import torch
from harness.cli import NEGATIVE, PROMPT, SEED, common, run_cli, run_in_process
from harness.frames import assert_frames_close, to_uint8


@pytest.fixture(scope="module")
def t2v(tiny_t2v):
    return tiny_t2v.model, tiny_t2v.diffusers, tiny_t2v.official


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_t2v_matches_diffusers_wan_pipeline(t2v, tmp_path):
    from diffusers import UniPCMultistepScheduler, WanPipeline

    model, ckpt, _ = t2v
    out = tmp_path / "ours"
    proc = run_cli(out, *common(ckpt))
    assert "TIMING SUMMARY" in proc.stderr
    ours = np.load(out / "frames.npy")

    pipe = WanPipeline(
        tokenizer=model.tokenizer,
        text_encoder=model.text_encoder,
        vae=model.vae,
        scheduler=UniPCMultistepScheduler.from_config(model.scheduler_config),
        transformer=model.transformer,
        transformer_2=model.transformer_2,
        boundary_ratio=model.boundary_ratio,
    )
    with torch.no_grad():
        ref = pipe(
            prompt=PROMPT,
            negative_prompt=NEGATIVE,
            height=64,
            width=64,
            num_frames=9,
            num_inference_steps=4,
            guidance_scale=4.0,
            guidance_scale_2=3.0,
            max_sequence_length=512,
            generator=torch.Generator("cpu").manual_seed(SEED),
            output_type="np",
        ).frames[0]
    assert_frames_close(ours, to_uint8(ref))

    sidecar = json.loads((out / "video.json").read_text())
    assert sidecar["seed"] == SEED and sidecar["schedule"] == "diffusers"
    assert set(sidecar["timings_s"]) >= {"load", "text", "denoise", "vae_decode", "total"}
    assert sidecar["frames_shape"] == [9, 64, 64, 3]
    assert os.path.getsize(out / "video.mp4") > 0
    assert not [f for f in os.listdir(out) if "partial" in f]


def test_official_layout_renders_the_same_frames(t2v, tmp_path):
    _, diffusers_ckpt, official_ckpt = t2v
    a, b = tmp_path / "a", tmp_path / "b"
    run_in_process(a, *common(diffusers_ckpt, schedule="official"))
    run_in_process(b, *common(official_ckpt))  # auto → official schedule for the official layout
    sa, sb = (json.loads((d / "video.json").read_text()) for d in (a, b))
    assert sb["schedule"] == "official" and sb["checkpoint"]["layout"] == "official"
    assert sa["frames_sha256"] == sb["frames_sha256"]


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_same_seed_same_video_and_another_seed_differs(t2v, tmp_path):
    _, ckpt, _ = t2v
    runs = {}
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        run_in_process(tmp_path / name, *common(ckpt, seed=seed, save_frames="false", steps=2))
        runs[name] = json.loads((tmp_path / name / "video.json").read_text())["frames_sha256"]
    assert runs["a"] == runs["b"] != runs["c"]


def test_boundary_shift_and_fps_settings_match_diffusers_boundary_ratio_and_flow_shift(t2v, tmp_path):
    """boundary= and shift= (what a server request's boundary_ratio and flow_shift set) are
    diffusers' WanPipeline(boundary_ratio=…) and the scheduler's flow_shift: the same frames
    (harness.frames' tolerance). At 0.5 the low-noise expert runs more steps than at the tiny
    model's 0.875, so a boundary that were ignored would fail. fps= sets the mp4's rate only."""
    import imageio.v3 as iio
    from diffusers import UniPCMultistepScheduler
    from harness.diffusers_reference import reference_frames

    model, ckpt, _ = t2v
    out = tmp_path / "ours"
    run_in_process(out, *common(ckpt, boundary=0.5, shift=5.0, fps=8, schedule="diffusers"))
    scheduler = UniPCMultistepScheduler.from_config({**model.scheduler_config, "flow_shift": 5.0})
    ref = reference_frames(model, scheduler=scheduler, boundary_ratio=0.5, guidance_scale=4.0, guidance_scale_2=3.0)
    assert_frames_close(np.load(out / "frames.npy"), ref)
    default = reference_frames(model, scheduler=scheduler, guidance_scale=4.0, guidance_scale_2=3.0)
    assert np.abs(default.astype(int) - ref.astype(int)).max() > 8  # the boundary changes the video
    assert iio.immeta(out / "video.mp4")["fps"] == 8.0
    assert json.loads((out / "video.json").read_text())["config"]["model"]["boundary"] == 0.5
