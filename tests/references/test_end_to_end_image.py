"""Image-conditioned runs: `python -m parallel_wan.run` with the tiny I2V-A14B and TI2V-5B models
renders the frames diffusers' WanImageToVideoPipeline / WanPipeline(expand_timesteps=True)
render from the same checkpoint, image, prompt and seed."""

import hashlib

import numpy as np
import pytest
import torch
from harness.cli import HEIGHT, WIDTH, common, run
from harness.diffusers_reference import reference_frames, tiny_checkpoint
from harness.frames import assert_frames_close, to_uint8
from harness.images import write_png
from PIL import Image

from parallel_wan.config.compose import compose_spec

# The tiny presets' guidance: I2V 3.5 for both experts (we set the low-noise one to 3.0 so a
# swapped guidance_scale / guidance_scale_2 shows); TI2V 5.0.
I2V_GUIDANCE_HIGH, I2V_GUIDANCE_LOW, TI2V_GUIDANCE = 3.5, 3.0, 5.0
# Two runs whose conditioning differs must differ by far more than MAX_ABS, or agreement with
# diffusers would prove nothing (measured: 70 levels for I2V, > 200 for TI2V).
CONDITIONING_MATTERS = 20


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    folder = tmp_path_factory.mktemp("images")
    # "resized": another size and aspect (4:3 → 1:1), so load_image's resize path runs
    return {
        "exact": write_png(folder / "exact.png", WIDTH, HEIGHT),
        "resized": write_png(folder / "resized.png", 96, 72),
    }


@pytest.fixture(scope="module")
def tiny_i2v(tmp_path_factory):
    return tiny_checkpoint("i2v", tmp_path_factory)


@pytest.fixture(scope="module")
def tiny_ti2v(tmp_path_factory):
    return tiny_checkpoint("ti2v", tmp_path_factory)


# ------------------------------------------------------------------------------ I2V-A14B
@pytest.fixture(scope="module")
def i2v_runs(tiny_i2v, images, tmp_path_factory):
    _, ckpt = tiny_i2v
    out = tmp_path_factory.mktemp("i2v_runs")
    return {
        name: run(
            out / name,
            ckpt,
            model="tiny_i2v",
            image=path,
            guidance_high=I2V_GUIDANCE_HIGH,
            guidance_low=I2V_GUIDANCE_LOW,
        )
        for name, path in images.items()
    }


@pytest.mark.parametrize("image", ["exact", "resized"])
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_i2v_matches_diffusers_image_to_video_pipeline(tiny_i2v, images, i2v_runs, image):
    model, _ = tiny_i2v
    ref = reference_frames(model, images[image], guidance_scale=I2V_GUIDANCE_HIGH, guidance_scale_2=I2V_GUIDANCE_LOW)
    assert_frames_close(i2v_runs[image]["frames"], ref)


def test_i2v_image_matters_and_is_recorded(images, i2v_runs):
    exact, resized = i2v_runs["exact"], i2v_runs["resized"]
    assert np.abs(exact["frames"].astype(np.int16) - resized["frames"]).max() > CONDITIONING_MATTERS
    record = resized["sidecar"]["image"]
    with open(images["resized"], "rb") as f:
        assert record["sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert record["path"] == resized["sidecar"]["config"]["image"] == images["resized"]
    assert record["size"] == [96, 72] and record["resized_to"] == [WIDTH, HEIGHT]
    assert resized["sidecar"]["steps_per_expert"] == {"high_noise": 2, "low_noise": 2}  # both experts ran
    assert "stretched" in resized["stderr"] and "stretched" not in exact["stderr"]


# ------------------------------------------------------------------------------ TI2V-5B
@pytest.fixture(scope="module")
def ti2v_runs(tiny_ti2v, images, tmp_path_factory):
    _, ckpt = tiny_ti2v
    out = tmp_path_factory.mktemp("ti2v_runs")
    return {
        "text": run(out / "text", ckpt, model="tiny_ti2v"),
        "image": run(out / "image", ckpt, model="tiny_ti2v", image=images["resized"]),
    }


def test_ti2v_text_only_matches_diffusers_wan_pipeline(tiny_ti2v, ti2v_runs):
    model, _ = tiny_ti2v
    assert_frames_close(ti2v_runs["text"]["frames"], reference_frames(model, guidance_scale=TI2V_GUIDANCE))
    assert "image" not in ti2v_runs["text"]["sidecar"]


def test_ti2v_with_image_matches_diffusers_image_to_video_pipeline(tiny_ti2v, images, ti2v_runs):
    model, _ = tiny_ti2v
    ref = reference_frames(model, images["resized"], guidance_scale=TI2V_GUIDANCE)
    assert_frames_close(ti2v_runs["image"]["frames"], ref)
    text, image = ti2v_runs["text"]["frames"], ti2v_runs["image"]["frames"]
    assert np.abs(text.astype(np.int16) - image).max() > CONDITIONING_MATTERS


def test_ti2v_first_frame_is_the_image(tiny_ti2v, images, ti2v_runs, tmp_path):
    """The held first latent frame is the normalised image latent, bit for bit, and decodes
    (the VAE is causal: frame 0 depends on latent frame 0 only) to the image's VAE round trip."""
    from diffusers.video_processor import VideoProcessor

    from parallel_wan import pipeline
    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.models import vae
    from parallel_wan.weights.loader import load_vae

    model, ckpt = tiny_ti2v
    spec = compose_spec(common(ckpt, model="tiny_ti2v", image=images["resized"], steps=1), output_dir=str(tmp_path))
    backend, described = start_torch_backend("cpu"), pipeline.preflight(spec)
    latents = pipeline.generate(spec, backend, described).latents

    image, _ = pipeline.load_image(images["resized"], HEIGHT, WIDTH)
    with Image.open(images["resized"]) as im:
        theirs = VideoProcessor(vae_scale_factor=16).preprocess(im.convert("RGB"), height=HEIGHT, width=WIDTH)
    np.testing.assert_array_equal(image, theirs.numpy())  # the same PIL resize and float32 arithmetic

    vcfg, params = load_vae(described, "float32")
    pixels = torch.from_numpy(image)[:, :, None]
    with torch.no_grad():
        held = vae.normalize_latents(vae.encode(params, pixels, backend.ops, vcfg), vcfg, backend.ops)
        np.testing.assert_array_equal(latents[:, :, :1], held.numpy())  # the same function of the same image

        z = model.vae.encode(pixels).latent_dist.mode()
        frame0 = model.vae.decode(z).sample[0, :, 0]
    mean = torch.tensor(model.vae.config.latents_mean).view(1, -1, 1, 1, 1)
    std = torch.tensor(model.vae.config.latents_std).view(1, -1, 1, 1, 1)
    theirs = ((z - mean) * (1.0 / std)).numpy()
    # diffusers' VAE: the same math in another reduction order, fp32 → relative error ≤ 1e-5
    assert np.linalg.norm(held.numpy() - theirs) / np.linalg.norm(theirs) <= 1e-5
    assert_frames_close(ti2v_runs["image"]["frames"][0], to_uint8(frame0.permute(1, 2, 0).numpy() * 0.5 + 0.5))
