"""Whole tiny runs with quantized weights. quantize=fp8|int8 with quant_compute=dequant in float32
equals the same run on a checkpoint whose block linears were dequantized beforehand (the widened
weights are the same numbers, so the frames are the same within one level); the FP8 GEMM video's
distance to the bf16 video is stated and bounded by the distance between two seeds' videos."""

import numpy as np
import pytest
from harness.cli import run
from safetensors.torch import load_file, save_file

from parallel_wan.weights.quantized.form import dequantize, quantize_rows
from parallel_wan.weights.quantized.names import quantizable

SMALL = {"steps": 2, "num_frames": 5, "height": 32, "width": 32}


@pytest.fixture(scope="module")
def wide(tiny_t2v):
    from pathlib import Path

    return Path(tiny_t2v.diffusers)  # float32 files: the checkpoint quantize= starts from


def _pre_dequantized(wide, folder, kind):
    """A copy of `wide` whose block linears hold dequantize(quantize_rows(W)) in float32."""
    import shutil

    shutil.copytree(wide, folder)
    for expert in ("transformer", "transformer_2"):
        for file in (folder / expert).glob("*.safetensors"):
            state = load_file(file)
            save_file({k: dequantize(*quantize_rows(v, kind)) if quantizable(k) else v for k, v in state.items()}, file)
    return folder


@pytest.mark.parametrize("kind", ["fp8", "int8"])
def test_quantize_dequant_equals_a_pre_dequantized_checkpoint(wide, tmp_path, kind):
    pre = _pre_dequantized(wide, tmp_path / "pre", kind)
    ours = run(tmp_path / "q", wide, quantize=kind, quant_compute="dequant", **SMALL)
    ref = run(tmp_path / "ref", pre, **SMALL)
    assert ours["sidecar"]["quantization"] == {"quantize": kind, "quant_compute": "dequant", "chosen": "dequant"}
    diff = np.abs(ours["frames"].astype(np.int16) - ref["frames"].astype(np.int16))
    print(f"quantize={kind} vs pre-dequantized: frames max abs {diff.max()}, {(diff > 0).sum()} values differ")
    assert diff.max() <= 1  # same weights, same arithmetic: equal but for a rounding flip (measured: 0 differ)


def test_fp8_gemm_video_distance_to_bf16(wide, tmp_path):
    bf16 = run(tmp_path / "bf16", wide, dtype="bfloat16", **SMALL)["frames"].astype(np.float64)
    fp8 = run(tmp_path / "fp8", wide, dtype="bfloat16", quantize="fp8", quant_compute="fp8", **SMALL)
    other_seed = run(tmp_path / "seed", wide, dtype="bfloat16", seed=4321, **SMALL)["frames"].astype(np.float64)
    assert fp8["sidecar"]["quantization"]["chosen"] == "fp8"
    frames = fp8["frames"].astype(np.float64)
    rms, seeds_rms = np.sqrt(((frames - bf16) ** 2).mean()), np.sqrt(((other_seed - bf16) ** 2).mean())
    psnr = 20 * np.log10(255 / rms)
    print(
        f"fp8 W8A8 vs bf16 video: RMS {rms:.2f} levels, PSNR {psnr:.1f} dB, max {np.abs(frames - bf16).max():.0f}; "
        f"another seed's bf16 video: RMS {seeds_rms:.2f}"
    )
    # The same video, not another one: e4m3 keeps 3 mantissa bits (≤ 2⁻⁴ relative per weight and
    # activation), so the FP8 video must stay far closer to the bf16 one than a change of seed moves it.
    assert rms < 0.25 * seeds_rms
