"""PyTorch's flash attention kernel for CPU tensors (attention_impl=sdpa; auto's first on CPU)."""

from __future__ import annotations

from . import ANY_HEAD_DIM, Kernel


def run(q, k, v, scale):
    import torch

    from ._layout import bhld, lse_bsh

    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(bhld(q), bhld(k), bhld(v), scale=scale)
    return bhld(out), lse_bsh(lse, q)


KERNEL = Kernel(
    name="cpu_flash",
    setting="sdpa",
    run=run,
    summary="PyTorch's flash kernel for CPU",
    priority={"cpu": 10},
    devices=("cpu",),
    dtypes=("float32", "float64", "bfloat16", "float16"),
    head_dims=ANY_HEAD_DIM,
    op="aten._scaled_dot_product_flash_attention_for_cpu",
    listed=10,
)
