"""The fused elementwise kernels (backends/torch/fused_kernels.py) in Triton's interpreter on
CPU, against the unfused ops they replace (models/elementwise.py, which CPU runs): each op over
broadcast and per-token modulation, float32 and bfloat16, a row width that is not a power of
two, and a whole tiny bf16 video with and without them.

Tolerance: the kernels compute in float32 like the unfused ops and round where they round, but
sum in another order, contract multiply-adds and take Triton's rsqrt, so an output may land one
rounding step away: every element within one unit in the last place (ulp) of the output dtype —
2⁻²³ of its binade in float32 (plus 1e-6 absolute for values near 0), 2⁻⁷ in bfloat16; RoPE's
outputs within two (the norm's rounding, then the rotation's) at the binade of their pair's
length (a rotation mixes the pair). Measured: ≤ 0.48 ulp in float32, 1 ulp and RoPE's 2 in bf16. A wrong broadcast, a
swapped RoPE pair or a missed rounding is off by far more. Runs in a spawned process that sets
TRITON_INTERPRET=1 before Triton kernels are defined (harness/interpreted.py)."""

import numpy as np
import pytest
from harness.interpreted import interpret_triton, video
from harness.ranks import run_on_ranks


def _ulps_off(got, want, magnitude=None):
    """The largest |got − want| in units of the last place of want's dtype at `magnitude` (want's
    own by default)."""
    import torch

    mantissa = {torch.float32: 23, torch.bfloat16: 7}[want.dtype]
    w = want.double()
    size = w.abs() if magnitude is None else magnitude
    binade = torch.exp2(torch.floor(torch.log2(size.clamp_min(1e-30))))
    ulp = (binade * 2.0**-mantissa).clamp_min(1e-6 if want.dtype == torch.float32 else 1e-30)
    return float(((got.double() - w).abs() / ulp).max())


def _fused_vs_unfused(rank, world):
    interpret_triton()
    import torch

    from parallel_wan.backends.torch import fused_kernels, ops
    from parallel_wan.models import elementwise

    gen = torch.Generator().manual_seed(0)

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=gen).to(dtype)

    off = {}
    b, length, heads, head_dim = 2, 5, 3, 16
    dim = heads * head_dim  # 48: not a power of two, so the rows are masked
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype)[6:]
        x, y = randn(b, length, dim, dtype=dtype) * 3 + 1, randn(b, length, dim, dtype=dtype)
        for per in ("step", "token"):  # (B, 1, dim) modulation, or per token (B, L, dim)
            rows = 1 if per == "step" else length
            scale, shift, gate = (randn(b, rows, dim) * 0.5 for _ in range(3))
            off["norm_modulate", name, per] = _ulps_off(
                fused_kernels.norm_modulate(x, scale, shift, 1e-6),
                elementwise.norm_modulate(x, scale, shift, 1e-6, ops),
            )
            off["gated_residual", name, per] = _ulps_off(
                fused_kernels.gated_residual(x, y, gate), elementwise.gated_residual(x, y, gate, ops)
            )
        weight = (randn(dim) * 0.2 + 1).to(dtype)
        angles = randn(length, head_dim // 2)
        cos, sin = torch.cos(angles), torch.sin(angles)
        got = fused_kernels.rms_norm_rope(x, weight, 1e-6, heads, cos, sin)
        want = elementwise.rms_norm_rope(x, weight, 1e-6, heads, cos, sin, ops)
        # a rotation mixes the pair: an ulp of its inputs is an ulp of the pair's length, which a
        # component near 0 (cos·a ≈ sin·b) cannot resolve on its own binade
        pairs = want.double().unflatten(-1, (-1, 2))
        length_of_pair = pairs.norm(dim=-1, keepdim=True).expand_as(pairs).flatten(-2)
        off["rms_norm_rope", name] = (_ulps_off(got, want, length_of_pair), got.dtype == want.dtype, tuple(got.shape))
    # the dispatch: CPU runs the unfused ops unless told otherwise
    x = randn(1, 2, dim)
    off["cpu_unfused"] = torch.equal(
        ops.gated_residual(x, x, x[:, :1]), elementwise.gated_residual(x, x, x[:, :1], ops)
    )
    return off


@pytest.mark.slow  # a spawned, interpreted process (tests/README.md)
def test_fused_kernels_equal_the_unfused_ops_within_an_ulp():
    off = run_on_ranks(_fused_vs_unfused, 1, timeout_s=300, preloaded=False)[0]
    print(off)
    for key, value in off.items():
        if key[0] == "rms_norm_rope":
            ulps, same_dtype, shape = value
            # two roundings (the weighted norm, the rotation), each possibly a step away
            assert same_dtype and shape == (2, 5, 3, 16) and ulps <= 2, (key, value)
        elif key != "cpu_unfused":
            assert value <= 1, (key, value)
    assert off["cpu_unfused"]


def _video_fused(rank, world, overrides, fused_on_cpu):
    if fused_on_cpu:
        interpret_triton()
        from parallel_wan.backends.torch import fused

        fused.FUSED_DEVICES.add("cpu")
    return video(rank, world, overrides)


@pytest.mark.slow
def test_a_video_with_fused_kernels_is_the_unfused_video():
    """float32, where an ulp is 2⁻²³: the fused kernels wired into every block (2 blocks, one
    step with CFG) leave the latents within 1e-5 of the unfused ones (measured 6.9e-7); one op
    computed or wired wrongly moves them by tens of percent. (In bfloat16 the same ulps compound
    through the tiny model's few, large activations to ~2e-2, as any reordering does.)"""
    base = ["dtype=float32", "steps=1", "num_frames=5", "height=32", "width=32", "seed=3", "prompt='a dog jumps'"]
    fused_latents, fused_frames, _ = run_on_ranks(_video_fused, 1, base, True, timeout_s=300, preloaded=False)[0]
    latents, frames, _ = video(0, 1, base)
    err = np.linalg.norm(fused_latents - latents) / np.linalg.norm(latents)
    diff = np.abs(fused_frames.astype(np.int16) - frames.astype(np.int16))
    print(f"latents rel {err:.2e}, frames max {diff.max()}")
    assert 0 < err <= 1e-5 and diff.max() <= 1
