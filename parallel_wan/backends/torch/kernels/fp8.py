"""FP8 attention (attention_impl=fp8): e4m3 QKᵀ with per-block scales, e4m3 PV with per-channel
value scales, float32 sums; our own masked lse-returning Triton kernel
(backends/torch/fp8_attention.py, fp8_kernel.py). Lossy (about 5e-2 relative), so auto never
picks it."""

from __future__ import annotations

from . import HeadDims, Kernel


def run(q, k, v, scale):
    from ..fp8_attention import fp8_attention  # imports triton: only when fp8 runs

    return fp8_attention(q, k, v, scale)


KERNEL = Kernel(
    name="fp8",
    setting="fp8",
    run=run,
    summary="FP8 attention: e4m3 QKᵀ and PV, float32 sums (lossy)",
    priority={"cpu": 10, "ampere": 10, "hopper": 10, "blackwell": 10},
    exact=False,
    min_capability=(8, 9),
    capability_why="FP8 tensor cores",
    dtypes=("bfloat16", "float16"),
    head_dims=HeadDims(one_of=(64, 128)),  # the tile shapes the kernel is tuned and compiled for
    packages=("triton",),
    install="Triton: pip install triton (it ships with torch's CUDA wheels)",
    package_label="Triton",
    interpreted=HeadDims(power_of_two_from=16),
    checks=("package", "device", "capability", "head_dim", "dtype"),
    listed=45,
)
