"""attention_impl=fp8: FP8 (e4m3) attention for the torch backend, returning the log-sum-exp like
every other kernel, so it serves every mesh — one device, Ulysses, ring and their hybrids.

The steps: keys smoothed (their mean over the sequence taken out, which leaves softmax unchanged
and keeps the keys' e4m3 scales small: SageAttention's trick, sage_attention.py); q and k
quantized to e4m3 with one scale per block of BLOCK_M queries / BLOCK_N keys (absmax / e4m3's largest,
sm_scale·log2(e) folded into q's); v quantized with one scale per channel over the keys (a
channel's values share a range across tokens, and PV sums over tokens, so a per-channel scale
comes off after the sum) and laid out keys-contiguous; then our kernel (fp8_kernel.py).
Smoothing shifts every score of a query row by q·mean(k)·scale, so the lse gets that back,
exactly, in float32.

Accuracy (derived from e4m3, checked in tests/parallel/test_fp8_attention.py against float64):
e4m3 keeps 3 mantissa bits, so a rounded value is off by at most 2⁻⁴ of itself, ~2.4 % RMS for
values spread over a binade. A score is a sum of D products each carrying two such errors: ~3.4 %
of the scores' spread, which at unit-variance scores moves the softmax weights by ~3.4 %; the
probabilities and the values add one rounding each to PV (~2.4 % each, independent). Together
≈ 5 % of the output's norm; the tests' bound is 8 %, the lse's 0.06 (natural-log units).

Where it runs — CUDA sm_89+ (FP8 tensor cores: L40S, RTX 40/50, H100/H200, B200), head_dim 64 or
128, bf16/fp16; on CPU only under TRITON_INTERPRET=1 (the tests) — is the fp8 kernel's
registered constraints (kernels/fp8.py).
"""

from __future__ import annotations

import torch

from ...weights.quantized.scales import absmax_steps

E4M3 = torch.float8_e4m3fn
LOG2E = 1.4426950408889634
TOKEN_CHUNK = 4096  # tokens a float32 working copy covers at once: 4096 × 40 heads × 128 is 84 MB


def fp8_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float):
    """A registered kernel's signature (kernels/): q (B, S, H, D), k/v (B, L, H, D) → (out
    (B, S, H, D) in q's dtype, lse (B, S, H) float32)."""
    from .attention import lse_dtype
    from .fp8_kernel import BLOCK_M, BLOCK_N, launch_attention
    from .sage_attention import smoothing_shift

    mean_k = k.mean(dim=1, keepdim=True)
    q8, q_scale = quantize_blocks(q, BLOCK_M, scale * LOG2E)
    k8, k_scale = quantize_blocks(k - mean_k, BLOCK_N)
    vt8, v_scale = quantize_channels(v)
    out, lse = launch_attention(q8, k8, vt8, q_scale, k_scale, v_scale, q.dtype)
    return out, (lse + smoothing_shift(q, mean_k, scale)).to(lse_dtype(q.dtype))


def quantize_blocks(x: torch.Tensor, block: int, factor: float = 1.0):
    """x (B, L, H, D) → (e4m3 (B, L, H, D), scale (B, H, ⌈L/block⌉) float32) with one scale per
    `block` tokens of a head: absmax / e4m3's largest, so x/scale fills e4m3's range; `factor` is
    folded into the scale (x ≈ e4m3 · scale / factor). An all-zero block gets scale 0 and zeros.
    A partial last block is measured on its own tokens: x is never padded (a padded copy of q or
    k at 720p — 75,600 % 128 = 80 — would be one more pass over 774 MB per call)."""
    b, length, h, d = x.shape
    whole = length - length % block
    steps = [absmax_steps(x[:, :whole].reshape(b, whole // block, block, h, d), (2, 4))]  # (B, blocks, H)
    if whole < length:
        steps.append(absmax_steps(x[:, whole:], (1, 3)).unsqueeze(1))
    step = torch.cat(steps, dim=1)
    inverse = torch.where(step > 0, 1.0 / step, 0.0).repeat_interleave(block, dim=1)[:, :length]  # per token
    out = torch.empty((b, length, h, d), dtype=E4M3, device=x.device)
    for first in range(0, length, TOKEN_CHUNK):
        part = slice(first, first + TOKEN_CHUNK)
        # float32 before the cast: x/step within e4m3's range, rounded once, to nearest even
        out[:, part] = (x[:, part].to(torch.float32) * inverse[:, part, :, None]).to(E4M3)
    return out, (step * factor).transpose(1, 2).contiguous()


def quantize_channels(v: torch.Tensor):
    """v (B, L, H, D) → (e4m3 vᵀ (B, H, D, L) with the keys contiguous, scale (B, H, D) float32):
    one scale per channel over all L keys."""
    step = absmax_steps(v, 1)  # (B, H, D)
    inverse = torch.where(step > 0, 1.0 / step, 0.0)
    b, length, h, d = v.shape
    out = torch.empty((b, h, d, length), dtype=E4M3, device=v.device)
    for first in range(0, length, TOKEN_CHUNK):
        part = v[:, first : first + TOKEN_CHUNK].to(torch.float32) * inverse[:, None]
        out[..., first : first + TOKEN_CHUNK] = part.permute(0, 2, 3, 1).to(E4M3)
    return out, step
