"""FlashAttention 3 (flash-attn's Hopper build, `flash_attn_interface`): sm_90's wgmma/TMA, so
Hopper only; auto's first there when installed (README "Attention kernels" says why)."""

from __future__ import annotations

from . import HeadDims, Kernel
from .flash_attn import INSTALL


def run(q, k, v, scale):
    from flash_attn_interface import flash_attn_func

    from ._layout import lse_bsh

    try:
        result = flash_attn_func(q, k, v, softmax_scale=scale, return_attn_probs=True)
    except TypeError:  # FA3 betas before `return_attn_probs` always return (out, lse)
        result = flash_attn_func(q, k, v, softmax_scale=scale)
    return result[0], lse_bsh(result[1], q)


KERNEL = Kernel(
    name="flash_attn3",
    setting="flash",
    run=run,
    summary="FlashAttention 3 (flash-attn's Hopper build)",
    priority={"hopper": 10},
    dtypes=("bfloat16", "float16"),
    head_dims=HeadDims(multiple_of=8, at_most=256),
    packages=("flash_attn_interface",),
    import_check=True,
    install=INSTALL,
    package_label="flash-attn 3",
    suggested_on=("hopper",),
    listed=20,
)
