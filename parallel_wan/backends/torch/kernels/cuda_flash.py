"""PyTorch's own flash kernel on CUDA (FlashAttention 2; attention_impl=sdpa's first on a GPU)."""

from __future__ import annotations

from . import HeadDims, Kernel


def run(q, k, v, scale):
    import torch

    from ._layout import bhld, lse_bsh

    out, lse, *_ = torch.ops.aten._scaled_dot_product_flash_attention(bhld(q), bhld(k), bhld(v), scale=scale)
    return bhld(out), lse_bsh(lse, q)


KERNEL = Kernel(
    name="cuda_flash",
    setting="sdpa",
    run=run,
    summary="PyTorch's flash kernel (FlashAttention 2)",
    priority={"ampere": 40, "hopper": 40, "blackwell": 40},
    dtypes=("bfloat16", "float16"),
    head_dims=HeadDims(multiple_of=8, at_most=256),
    op="aten._scaled_dot_product_flash_attention",
    listed=10,
)
