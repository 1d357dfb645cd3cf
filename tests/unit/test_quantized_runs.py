"""Whole tiny runs with quantized weights. quantize=fp8|int8|nvfp4 with quant_compute=dequant in
float32 equals the same run on a checkpoint whose block linears were dequantized beforehand (the
widened weights are the same numbers, so the frames are the same within one level); the FP8 GEMM
video's and the NVFP4 video's distances to the bf16 video are stated and bounded by the distance
between two seeds' videos."""

import numpy as np
import pytest
from harness.cli import run
from safetensors.torch import load_file, save_file

from parallel_wan.weights.quantized.form import dequantize, quantize_layer
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
            save_file(
                {k: dequantize(*quantize_layer(v, kind)) if quantizable(k) else v for k, v in state.items()}, file
            )
    return folder


@pytest.mark.parametrize("kind", ["fp8", "int8", "nvfp4"])
def test_quantize_dequant_equals_a_pre_dequantized_checkpoint(wide, tmp_path, kind):
    pre = _pre_dequantized(wide, tmp_path / "pre", kind)
    ours = run(tmp_path / "q", wide, quantize=kind, quant_compute="dequant", **SMALL)
    ref = run(tmp_path / "ref", pre, **SMALL)
    assert ours["sidecar"]["quantization"] == {"quantize": kind, "quant_compute": "dequant", "chosen": "dequant"}
    diff = np.abs(ours["frames"].astype(np.int16) - ref["frames"].astype(np.int16))
    print(f"quantize={kind} vs pre-dequantized: frames max abs {diff.max()}, {(diff > 0).sum()} values differ")
    assert diff.max() <= 1  # same weights, same arithmetic: equal but for a rounding flip (measured: 0 differ)


@pytest.fixture(scope="module")
def bf16_videos(wide, tmp_path_factory):
    """The bf16 video and another seed's: what a quantized video is measured against."""
    folder = tmp_path_factory.mktemp("bf16")
    bf16 = run(folder / "bf16", wide, dtype="bfloat16", **SMALL)["frames"].astype(np.float64)
    other_seed = run(folder / "seed", wide, dtype="bfloat16", seed=4321, **SMALL)["frames"].astype(np.float64)
    return bf16, np.sqrt(((other_seed - bf16) ** 2).mean())


# case → (quantize, quant_compute, the largest RMS distance to the bf16 video as a share of
# another seed's). fp8: W8A8; e4m3 keeps 3 mantissa bits (≤ 2⁻⁴ relative per weight and
# activation). nvfp4: e2m1 has 8 magnitudes, so a weight's rounding is ~9.5% of its block's RMS
# (tests/unit/test_nvfp4.py), 3.6× fp8's (2.6%); on the CPU its layers are widened (no FP4 kernel:
# only the weights are rounded); nvfp4_w4a4 (quant_compute=fp4) runs the FP4 GEMM path as a B200 would, the CPU's
# `_scaled_mm` stood in for (harness/fp4_stand_in.py), so the activations are rounded to e2m1 too.
# Each must stay far closer to the bf16 video than a change of seed moves it — the same video —
# within fp8's bound. Measured (share of another seed's distance; PSNR): fp8 0.059 (36.4 dB), nvfp4
# 0.063 (35.9 dB), nvfp4_w4a4 0.177 (26.9 dB): rounding the activations to e2m1 costs the most.
VIDEO_BOUND = {
    "fp8": ("fp8", "fp8", 0.25),
    "nvfp4": ("nvfp4", "dequant", 0.25),
    "nvfp4_w4a4": ("nvfp4", "fp4", 0.25),
}


@pytest.mark.parametrize("case", sorted(VIDEO_BOUND))
def test_quantized_video_distance_to_bf16(case, wide, bf16_videos, tmp_path, monkeypatch):
    import torch
    from harness.fp4_stand_in import scaled_mm_fp4

    from parallel_wan.backends.torch import fp4_gemm

    bf16, seeds_rms = bf16_videos
    kind, compute, bound = VIDEO_BOUND[case]
    fp4_calls = []
    if case == "nvfp4_w4a4":
        monkeypatch.setattr(fp4_gemm, "fp4_supported", lambda device: True)
        monkeypatch.setattr(torch, "_scaled_mm", lambda *a, **k: fp4_calls.append(1) or scaled_mm_fp4(*a, **k))
    got = run(tmp_path / case, wide, dtype="bfloat16", quantize=kind, quant_compute=compute, **SMALL)
    assert got["sidecar"]["quantization"]["chosen"] == compute
    assert bool(fp4_calls) == (case == "nvfp4_w4a4")
    frames = got["frames"].astype(np.float64)
    rms = np.sqrt(((frames - bf16) ** 2).mean())
    psnr = 20 * np.log10(255 / rms)
    print(
        f"{case} vs bf16 video: RMS {rms:.2f} levels, PSNR {psnr:.1f} dB, max {np.abs(frames - bf16).max():.0f}; "
        f"another seed's bf16 video: RMS {seeds_rms:.2f} ({rms / seeds_rms:.3f} of it)"
    )
    assert rms < bound * seeds_rms
