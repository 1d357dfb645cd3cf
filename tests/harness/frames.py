"""Comparing videos: uint8 frames against a reference, latents by relative error."""

import numpy as np

# uint8 frames: fp32 end to end, the two pipelines differ by ~1e-6 relative in the latents
# (reduction order); after 4 steps and the VAE that can flip a rounding, so ±2 levels.
MAX_ABS = 2


def to_uint8(video):
    """diffusers' output_type="np" frames in [0, 1] → uint8, rounded as our pipeline rounds."""
    return np.round(np.clip(video, 0.0, 1.0) * 255.0).astype(np.uint8)


def assert_frames_close(ours, ref, max_abs=MAX_ABS):
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    diff = np.abs(ours.astype(np.int16) - ref.astype(np.int16))
    assert diff.max() <= max_abs, f"max abs diff {diff.max()}, mean {diff.mean():.4f}"


# fp32 on CPU: sharding changes only the attention's reduction order (ring's LSE merge) and
# the batch shape of the matmuls; measured ≤ 1e-6 on the final latents after 3 steps.
RTOL = 1e-5


def assert_same_video(got, ref):
    latents, frames, mesh = got
    ref_latents, ref_frames, _ = ref
    err = np.linalg.norm(latents - ref_latents) / np.linalg.norm(ref_latents)
    assert err <= RTOL, f"latents relative error {err:.2e} on mesh {mesh}"
    # Frames: the same video up to rounding. A ~1e-7 relative change in the latents moves a few
    # pixel values across a .5 boundary of the uint8 rounding (seen: 6 of 110,592 values, by 1).
    diff = np.abs(frames.astype(np.int16) - ref_frames.astype(np.int16))
    assert diff.max() <= 1 and (diff > 0).mean() < 1e-3, f"frames differ: max {diff.max()}, {(diff > 0).sum()} values"
    print(f"mesh {mesh}: latents rel err {err:.2e}, frames max abs diff {diff.max()} ({(diff > 0).sum()} values)")
    return mesh


def assert_same_frames(frames, ref, what):
    # cp2 changes only the attention's reduction order (≤ 1e-6 relative on the latents, see
    # test_parallel_pipeline.py): that can move a few uint8 values across a rounding edge, by 1.
    diff = np.abs(frames.astype(np.int16) - ref.astype(np.int16))
    print(f"{what}: frames max abs diff {diff.max()} ({(diff > 0).sum()} of {diff.size} values)")
    assert frames.shape == ref.shape and diff.max() <= 1 and (diff > 0).mean() < 1e-3, (diff.max(), (diff > 0).sum())


def assert_quantized_near_bf16(frames, other_seed: int) -> None:
    """quantize=fp8 and int8 each give a video nearer the bf16 one than another seed's is, by a
    wide margin (RMS below a quarter of it): `frames(name, **settings)` runs and returns float
    frames (the FP8 path's check, for the models whose reference has no quantized run)."""
    dense = frames("bf16")
    other = np.sqrt(np.mean((frames("seed", seed=other_seed) - dense) ** 2))
    for quantize in ("fp8", "int8"):
        rms = np.sqrt(np.mean((frames(quantize, quantize=quantize) - dense) ** 2))
        print(f"quantize={quantize}: RMS {rms:.2f} levels from bf16; another seed {other:.2f}")
        assert rms < 0.25 * other, quantize
