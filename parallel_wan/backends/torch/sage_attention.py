"""attention_impl=sage: SageAttention (int8 QKᵀ with per-block scales, fp16 PV) for the
torch backend, returning the log-sum-exp like every other kernel, so it serves every mesh —
one device, Ulysses, ring and their hybrids.

The steps are sageattn()'s from sageattention 1.0.6 (core.py): keys smoothed (their mean over
the sequence taken out, which leaves softmax unchanged and makes int8 keys accurate), q and k
quantized by Sage's own Triton kernel, v in fp16, then the attention kernel — our own
(sage_kernel.py: the same scheme, with padding keys masked and the lse written). Smoothing
shifts every score of a query row by q·mean(k)·scale, so the lse gets that back, exactly, in
float32.

Where it runs — CUDA sm_80+, head_dim 64 or 128 (the ones Sage's quantizer and our kernel are
built for), bf16/fp16; on CPU only under TRITON_INTERPRET=1, where the same kernels run in
Triton's interpreter (that is how the tests check them without a GPU; nobody should run a video
that way) — is the sage kernel's registered constraints (kernels/sage.py), which the refusals
before a run read.
"""

from __future__ import annotations

import torch


def sage_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float):
    """A registered kernel's signature (kernels/): q (B, S, H, D), k/v (B, L, H, D) → (out
    (B, S, H, D) in q's dtype, lse (B, S, H) float32)."""
    from sageattention.quant_per_block import per_block_int8

    from .attention import lse_dtype
    from .sage_kernel import BLOCK_M, BLOCK_N, launch_attention

    q = q if q.stride(-1) == 1 else q.contiguous()  # the kernels address the last dim unstrided
    mean_k = k.mean(dim=1, keepdim=True)
    q_int8, q_scale, k_int8, k_scale = per_block_int8(
        q, k - mean_k, BLKQ=BLOCK_M, BLKK=BLOCK_N, sm_scale=scale, tensor_layout="NHD"
    )
    # A block of all-zero rows (one key minus its own mean) gets scale 0 and, from 0/0, undefined
    # int8 values: harmless, the kernel multiplies every product by that 0 scale.
    v16 = v.to(torch.float16)  # Sage's PV runs in fp16 whatever the inputs
    v16 = v16 if v16.stride(-1) == 1 else v16.contiguous()
    out, lse = launch_attention(q_int8, k_int8, v16, q_scale, k_scale, q.dtype)
    return out, (lse + smoothing_shift(q, mean_k, scale)).to(lse_dtype(q.dtype))


SHIFT_CHUNK = 4096  # tokens: a float32 copy of 4096 × 40 heads × 128 is 84 MB, of a whole 720p sequence 1.5 GB


def smoothing_shift(q: torch.Tensor, mean_k: torch.Tensor, scale: float) -> torch.Tensor:
    """q·mean(k)·scale per (B, S, H) in float32, exactly what smoothing took off every score of
    the row. A product and a sum, not a matmul (whose float32 inputs a bf16 run never has), over
    chunks of tokens so the float32 copy of q stays small."""
    mean = mean_k.to(torch.float32)
    return torch.cat([(part.to(torch.float32) * mean).sum(-1) for part in q.split(SHIFT_CHUNK, dim=1)], dim=1) * scale
