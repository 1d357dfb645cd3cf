"""The flash-attn package, FlashAttention 2 (attention_impl=flash; auto's first before Hopper
when installed)."""

from __future__ import annotations

from . import HeadDims, Kernel

# One line for the setting: flash-attn 3 (flash_attn3.py) is the same setting's Hopper build.
INSTALL = "flash-attn (3 on Hopper, or 2): pip install flash-attn --no-build-isolation"


def run(q, k, v, scale):
    from flash_attn import flash_attn_func

    from ._layout import lse_bsh

    # flash-attn takes (B, L, H, D) directly and returns lse (B, H, S) in float32.
    out, lse, _ = flash_attn_func(q, k, v, softmax_scale=scale, return_attn_probs=True)
    return out, lse_bsh(lse, q)


KERNEL = Kernel(
    name="flash_attn",
    setting="flash",
    run=run,
    summary="FlashAttention 2 (the flash-attn package)",
    priority={"ampere": 30, "hopper": 30, "blackwell": 30},
    min_capability=(8, 0),
    dtypes=("bfloat16", "float16"),
    head_dims=HeadDims(multiple_of=8, at_most=256),
    packages=("flash_attn",),
    import_check=True,
    install=INSTALL,
    package_label="flash-attn 2",
    listed=20,
)
