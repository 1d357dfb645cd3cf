"""SageAttention (attention_impl=sage): int8 QKᵀ, fp16 PV, our own masked lse-returning kernel
(backends/torch/sage_attention.py, sage_kernel.py). Lossy (about 1e-2 relative), so auto never
picks it."""

from __future__ import annotations

from . import HeadDims, Kernel


def run(q, k, v, scale):
    from ..sage_attention import sage_attention  # imports triton: only when sage runs

    return sage_attention(q, k, v, scale)


KERNEL = Kernel(
    name="sage",
    setting="sage",
    run=run,
    summary="SageAttention 1.0.6: int8 QKᵀ, fp16 PV (lossy)",
    priority={"cpu": 10, "ampere": 10, "hopper": 10, "blackwell": 10},
    exact=False,
    min_capability=(8, 0),
    capability_why="int8 tensor cores",
    dtypes=("bfloat16", "float16"),
    head_dims=HeadDims(one_of=(64, 128)),  # the ones Sage's quantizer and our kernel are built for
    packages=("sageattention", "triton"),
    install="SageAttention: pip install 'parallel_wan[sage]' (sageattention==1.0.6)",
    package_label="SageAttention",
    interpreted=HeadDims(power_of_two_from=16),
    # the package first: the Triton interpreter (tests) needs it too
    checks=("package", "device", "capability", "head_dim", "dtype"),
    listed=40,
)
