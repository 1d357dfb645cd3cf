"""Quantized expert files (`weights_high=` / `weights_low=` / `weights=`) render what diffusers'
pipelines render from the same files dequantized into an ordinary checkpoint.

The oracle (../shared/research/quantized_formats.md): each file written here from the tiny
model in a user's format (tests/harness/quantized_files.py: Kijai scaled fp8, ComfyUI fp8 and
int8 blockwise, LightX2V int8 and fp8, plain bf16, NVFP4 from ComfyUI and LightX2V; with and
without the `model.diffusion_model.` prefix), dequantized W = q · s in float32 by the harness into
the diffusers transformers, rendered by WanPipeline / WanImageToVideoPipeline. Our float32 run
keeps the weights quantized in memory and widens each layer as it runs (ops.dense) — the same
float32 products, so the weights are bit-identical and only the two pipelines' own reduction
orders differ (harness/frames.py MAX_ABS, measured here: at most 1 level). The same run
without the files must differ by far more, or agreement would prove nothing.

A14B runs cover two formats each (high ≠ low), so four runs cover all eight (NVFP4: ComfyUI's
and LightX2V's, widened as each layer runs on the CPU).
"""

import numpy as np
import pytest
from harness.cli import run
from harness.diffusers_reference import reference_frames, tiny_checkpoint
from harness.frames import assert_frames_close
from harness.images import write_png
from harness.quantized_files import dequantized_model, write_expert_file

# (high-noise file, prefixed?), (low-noise file, prefixed?)
T2V_PAIRS = {
    "scaled_fp8+lightx2v_int8": (("scaled_fp8", True), ("lightx2v_int8", False)),
    "comfy_fp8+comfy_int8": (("comfy_fp8", False), ("comfy_int8", True)),
    "lightx2v_fp8+plain_bf16": (("lightx2v_fp8", True), ("plain_bf16", False)),
    "comfy_nvfp4+lightx2v_nvfp4": (("comfy_nvfp4", False), ("lightx2v_nvfp4", True)),
}
FORMAT_NAME = {
    "scaled_fp8": "scaled_fp8",
    "comfy_fp8": "comfy_mixed",
    "comfy_int8": "comfy_mixed",
    "lightx2v_int8": "lightx2v",
    "lightx2v_fp8": "lightx2v",
    "plain_bf16": "plain",
    "comfy_nvfp4": "comfy_mixed",
    "lightx2v_nvfp4": "lightx2v",
}
GUIDANCE = {"guidance_high": 4.0, "guidance_low": 3.0}
# 1 level: both sides multiply the same float32 weights; only accumulation order differs.
LEVELS = 1
# The quantization itself must show: a file's run vs the unquantized checkpoint's (measured: 8 levels).
QUANTIZATION_SHOWS = 2


@pytest.fixture(scope="module")
def files(tiny_t2v, tmp_path_factory):
    folder = tmp_path_factory.mktemp("quantized_t2v")
    model = tiny_t2v.model
    out = {}
    for name, pair in T2V_PAIRS.items():
        (fh, ph), (fl, pl) = pair
        out[name] = (
            write_expert_file(folder / f"high_{fh}.safetensors", model.transformer, fh, prefix=ph),
            write_expert_file(folder / f"low_{fl}.safetensors", model.transformer_2, fl, prefix=pl),
        )
    return out


@pytest.mark.slow  # three runs and three diffusers renders: over 5 s in the suite's run (tests/README.md)
@pytest.mark.parametrize("pair", list(T2V_PAIRS))
def test_t2v_files_match_diffusers_on_the_dequantized_checkpoint(tiny_t2v, files, pair, tmp_path):
    high, low = files[pair]
    ours = run(tmp_path / "ours", tiny_t2v.diffusers, weights_high=high, weights_low=low, **GUIDANCE)
    ref = reference_frames(dequantized_model(tiny_t2v.model, high, low), guidance_scale=4.0, guidance_scale_2=3.0)
    assert_frames_close(ours["frames"], ref, max_abs=LEVELS)
    record = ours["sidecar"]["expert_files"]
    assert record["high_noise"]["path"] == high and record["low_noise"]["path"] == low
    assert [record[e]["format"] for e in ("high_noise", "low_noise")] == [FORMAT_NAME[f] for f, _ in T2V_PAIRS[pair]]
    for expert in ("high_noise", "low_noise"):  # logged on the main rank
        assert f"{expert} expert from weights_{expert.split('_')[0]}=" in ours["stderr"]


def test_the_quantization_shows_in_the_frames(tiny_t2v, files, tmp_path):
    """Against the unquantized checkpoint the int8/fp8 run differs visibly: the comparison above
    is not blind to the files."""
    high, low = files["scaled_fp8+lightx2v_int8"]
    ours = run(tmp_path / "q", tiny_t2v.diffusers, weights_high=high, weights_low=low, **GUIDANCE)
    ref = reference_frames(tiny_t2v.model, guidance_scale=4.0, guidance_scale_2=3.0)
    diff = np.abs(ours["frames"].astype(np.int16) - ref.astype(np.int16)).max()
    print(f"quantized files vs the unquantized checkpoint: {diff} levels")
    assert diff > QUANTIZATION_SHOWS, diff


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    from harness.cli import HEIGHT, WIDTH

    return write_png(tmp_path_factory.mktemp("image") / "first.png", WIDTH, HEIGHT)


def test_i2v_files_match_diffusers(tmp_path_factory, image, tmp_path):
    model, ckpt = tiny_checkpoint("i2v", tmp_path_factory)
    high = write_expert_file(tmp_path / "high.safetensors", model.transformer, "comfy_int8", prefix=False)
    low = write_expert_file(tmp_path / "low.safetensors", model.transformer_2, "scaled_fp8", prefix=True)
    ours = run(
        tmp_path / "ours",
        ckpt,
        model="tiny_i2v",
        image=image,
        weights_high=high,
        weights_low=low,
        guidance_high=3.5,
        guidance_low=3.0,
    )
    ref = reference_frames(dequantized_model(model, high, low), image, guidance_scale=3.5, guidance_scale_2=3.0)
    assert_frames_close(ours["frames"], ref, max_abs=LEVELS)
    assert ours["sidecar"]["expert_files"]["high_noise"]["format"] == "comfy_mixed"


def test_ti2v_file_matches_diffusers(tmp_path_factory, image, tmp_path):
    model, ckpt = tiny_checkpoint("ti2v", tmp_path_factory)
    single = write_expert_file(tmp_path / "single.safetensors", model.transformer, "lightx2v_int8", prefix=True)
    ours = run(tmp_path / "ours", ckpt, model="tiny_ti2v", image=image, weights=single, guidance_high=5.0)
    ref = reference_frames(dequantized_model(model, single), image, guidance_scale=5.0)
    assert_frames_close(ours["frames"], ref, max_abs=LEVELS)
    assert ours["sidecar"]["expert_files"]["single"] == {
        "path": single,
        "format": "lightx2v",
        "stored_dtype": "int8",
        "quantized_tensors": 20,
    }
