"""First-last-frame video (issue 42 part 3): `image=` and `last_image=` on I2V-A14B render what
diffusers' WanImageToVideoPipeline(last_image=…) renders from the same tiny checkpoint, images,
prompt and seed — [first, black frames…, last] VAE-encoded, the mask set on the first and the last
frame —; the last frame matters and is recorded; every mesh and JAX give the one-device video;
a model that takes no last frame, too few frames, a missing or broken file are one line each."""

import hashlib
import os

import numpy as np
import pytest
from harness.cli import HEIGHT, WIDTH, run
from harness.diffusers_reference import reference_frames, tiny_checkpoint
from harness.frames import assert_frames_close, assert_same_video
from harness.images import write_png
from harness.jax_runs import generate as jax_generate, raw_config
from harness.ranks import generate_on_rank, run_on_ranks
from PIL import Image

from parallel_wan.config import ConfigError
from parallel_wan.run import validate_job

GUIDANCE = dict(guidance_high=3.5, guidance_low=3.0)
MATTERS = 20  # levels: the last frame changes the video far more than the tolerance


@pytest.fixture(scope="module")
def frames_in(tmp_path_factory):
    folder = tmp_path_factory.mktemp("flf")
    first = write_png(folder / "first.png", WIDTH, HEIGHT)
    with Image.open(first) as im:  # another picture: the first one turned upside down and its colours swapped
        Image.fromarray(np.asarray(im)[::-1, :, ::-1].copy()).save(folder / "last.png")
    return first, str(folder / "last.png")


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_first_last_frame_matches_diffusers_and_the_last_frame_matters(tmp_path_factory, tmp_path, frames_in):
    first, last = frames_in
    model, ckpt = tiny_checkpoint("i2v", tmp_path_factory)
    ours = run(tmp_path / "flf", ckpt, model="tiny_i2v", image=first, last_image=last, **GUIDANCE)
    ref = reference_frames(model, first, last_image=last, guidance_scale=3.5, guidance_scale_2=3.0)
    assert_frames_close(ours["frames"], ref)
    only_first = run(tmp_path / "i2v", ckpt, model="tiny_i2v", image=first, **GUIDANCE)
    assert np.abs(ours["frames"].astype(int) - only_first["frames"]).max() > MATTERS
    record = ours["sidecar"]["image"]["last_image"]
    with open(last, "rb") as f:
        assert record["sha256"] == hashlib.sha256(f.read()).hexdigest() and record["path"] == last
    assert ours["sidecar"]["config"]["last_image"] == last and "last_image" not in only_first["sidecar"]["config"]


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_every_mesh_and_jax_render_the_one_device_first_last_frame_video(frames_in):
    first, last = frames_in
    base = [
        "model=tiny_i2v",
        "dtype=float32",
        "steps=3",
        "num_frames=9",
        "seed=3",
        "prompt='a dog jumps'",
        "height=48",  # 3×3×3 = 27 tokens: padded on cp2 and cp4
        "width=48",
        f"image={first}",
        f"last_image={last}",
    ]
    ref = run_on_ranks(generate_on_rank, 1, base, timeout_s=300)[0]
    for world, mesh in ((2, ["mesh=cp2"]), (4, ["mesh=dp2_cp2", "mesh.ulysses=1", "mesh.ring=2"])):
        assert_same_video(run_on_ranks(generate_on_rank, world, base + mesh, timeout_s=300)[0], ref)
    gen, _, _ = jax_generate([*base, "backend=jax", "mesh=dp2_cp4"])
    assert_same_video((gen.latents, gen.frames, {"dp": 2, "cp": 4}), ref)


def test_a_last_frame_is_refused_where_it_cannot_be_used(tmp_path, frames_in):
    first, last = frames_in
    for words, message in (
        (["model=tiny_ti2v", f"image={first}"], "model=tiny_ti2v takes no last frame; first-last-frame video is I2V"),
        (["model=tiny"], "model=tiny takes no last frame"),
        (["model=tiny_i2v", f"image={first}", "num_frames=1"], "set num_frames=5 or more"),
    ):
        with pytest.raises(ConfigError, match=message):
            validate_job(raw_config([*words, f"last_image={last}"]), 1)
    missing = os.path.join(tmp_path, "nope.png")
    with pytest.raises(ConfigError, match=f"last_image={missing} does not exist"):
        validate_job(raw_config(["model=tiny_i2v", f"image={first}", f"last_image={missing}"]), 1)
    (tmp_path / "bad.png").write_text("not an image")
    with pytest.raises(ConfigError, match="last_image=.*bad.png could not be read as an image"):
        validate_job(raw_config(["model=tiny_i2v", f"image={first}", f"last_image={tmp_path / 'bad.png'}"]), 1)
