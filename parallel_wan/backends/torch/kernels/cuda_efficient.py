"""PyTorch's memory-efficient kernel on CUDA: the one that takes float32 (and any head_dim)."""

from __future__ import annotations

from . import Kernel


def run(q, k, v, scale):
    import torch

    from ._layout import bhld, lse_bsh

    out, lse, *_ = torch.ops.aten._scaled_dot_product_efficient_attention(
        bhld(q), bhld(k), bhld(v), None, True, scale=scale
    )
    return bhld(out), lse_bsh(lse, q)


KERNEL = Kernel(
    name="cuda_efficient",
    setting="sdpa",
    run=run,
    summary="PyTorch's memory-efficient kernel",
    priority={"ampere": 50, "hopper": 50, "blackwell": 50},
    dtypes=("bfloat16", "float16", "float32"),
    slow="PyTorch's memory-efficient kernel",
    op="aten._scaled_dot_product_efficient_attention",
    listed=10,
)
