"""cuDNN's fused attention through PyTorch: auto's first on Blackwell (sm_100, where neither
flash-attn build runs) and second on Hopper — it uses their new tensor-core instructions, while
PyTorch's flash kernel is FA2's (README "Attention kernels": 562 against 360 TFLOP/s on an H200)."""

from __future__ import annotations

from . import HeadDims, Kernel


def run(q, k, v, scale):
    import torch

    from ._layout import bhld, lse_bsh

    out, lse, *_ = torch.ops.aten._scaled_dot_product_cudnn_attention(
        bhld(q), bhld(k), bhld(v), None, True, scale=scale
    )
    return bhld(out), lse_bsh(lse, q)


KERNEL = Kernel(
    name="cuda_cudnn",
    setting="cudnn",
    run=run,
    summary="cuDNN's fused attention (through PyTorch)",
    priority={"ampere": 45, "hopper": 20, "blackwell": 20},
    min_capability=(8, 0),
    dtypes=("bfloat16", "float16"),
    head_dims=HeadDims(multiple_of=8, at_most=256),
    op="aten._scaled_dot_product_cudnn_attention",
    listed=30,
)
