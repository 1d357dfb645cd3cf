"""Triton kernels for the elementwise work around a DiT block's matmuls, one pass over a token's
row each: eager PyTorch runs each of these as 3–6 kernels that read and write the (B, L, dim)
hidden states in float32 between them, which at 720p (75,600 tokens × 5120) is ~1.5 GB of
memory traffic per op per layer; fused, a row is read once and written once.

- `norm_modulate`: LayerNorm (no affine) of x in float32, · (1 + scale) + shift, cast back;
- `gated_residual`: x + y · gate in float32, cast back to x's dtype;
- `rms_norm_rope`: RMSNorm over the whole row (Wan's QK norm across heads) times its weight,
  then RoPE on interleaved pairs per head with the token's (cos, sin) — rounding where the
  unfused ops round (after the weighted norm, after the rotation), so the two agree to an ulp.

Each is a `torch.library.custom_op` with a fake implementation: eager calls launch the kernel;
under FakeTensorMode (the fake-GPU tests, the planner) it is one op that makes its outputs
without launching; torch.compile runs the unfused ops instead (fused.py), which it fuses itself. One program
per token row, the whole row in registers (dim ≤ 8192 lanes: 5120 for A14B, 3072 for TI2V-5B).
This module imports triton: backends/torch/fused.py imports it only on CUDA (or the tests'
interpreter)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def _warps(block: int) -> int:
    return 8 if block >= 4096 else 4 if block >= 1024 else 1


@triton.jit
def _norm_modulate_kernel(X, Scale, Shift, Out, L, D, s_sb, s_sl, t_sb, t_sl, eps, BLOCK_D: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # b·L + l; int64: rows × dim passes 2³¹ at 720p
    b, l = row // L, row % L
    cols = tl.arange(0, BLOCK_D)
    inside = cols < D
    x = tl.load(X + row * D + cols, mask=inside, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / D
    centred = tl.where(inside, x - mean, 0.0)
    normed = centred * tl.rsqrt(tl.sum(centred * centred, axis=0) / D + eps)
    scale = tl.load(Scale + b * s_sb + l * s_sl + cols, mask=inside, other=0.0)
    shift = tl.load(Shift + b * t_sb + l * t_sl + cols, mask=inside, other=0.0)
    tl.store(Out + row * D + cols, (normed * (1.0 + scale) + shift).to(Out.dtype.element_ty), mask=inside)


@triton.jit
def _gated_residual_kernel(X, Y, Gate, Out, L, D, g_sb, g_sl, BLOCK_D: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    b, l = row // L, row % L
    cols = tl.arange(0, BLOCK_D)
    inside = cols < D
    x = tl.load(X + row * D + cols, mask=inside, other=0.0).to(tl.float32)
    y = tl.load(Y + row * D + cols, mask=inside, other=0.0).to(tl.float32)
    gate = tl.load(Gate + b * g_sb + l * g_sl + cols, mask=inside, other=0.0)
    tl.store(Out + row * D + cols, (x + y * gate).to(Out.dtype.element_ty), mask=inside)


@triton.jit
def _rms_norm_rope_kernel(X, W, Cos, Sin, Out, L, PAIRS, HEAD_PAIRS, eps, BLOCK_P: tl.constexpr):
    """PAIRS = dim / 2 interleaved pairs per row; HEAD_PAIRS = head_dim / 2 per head, the
    columns of the (L, head_dim/2) tables."""
    row = tl.program_id(0).to(tl.int64)
    l = row % L
    pair = tl.arange(0, BLOCK_P)
    inside = pair < PAIRS
    base = X + row * 2 * PAIRS + 2 * pair
    x_even = tl.load(base, mask=inside, other=0.0).to(tl.float32)
    x_odd = tl.load(base + 1, mask=inside, other=0.0).to(tl.float32)
    inverse = tl.rsqrt((tl.sum(x_even * x_even, axis=0) + tl.sum(x_odd * x_odd, axis=0)) / (2 * PAIRS) + eps)
    # F.rms_norm rounds once, after the weight's product (float32 inside); RoPE then rotates
    # the rounded pair in float32 and rounds again
    w_even = tl.load(W + 2 * pair, mask=inside, other=0.0).to(tl.float32)
    w_odd = tl.load(W + 2 * pair + 1, mask=inside, other=0.0).to(tl.float32)
    n_even = (x_even * inverse * w_even).to(Out.dtype.element_ty).to(tl.float32)
    n_odd = (x_odd * inverse * w_odd).to(Out.dtype.element_ty).to(tl.float32)
    column = l * HEAD_PAIRS + pair % HEAD_PAIRS
    cos = tl.load(Cos + column, mask=inside, other=0.0)
    sin = tl.load(Sin + column, mask=inside, other=0.0)
    out = Out + row * 2 * PAIRS + 2 * pair
    tl.store(out, (n_even * cos - n_odd * sin).to(Out.dtype.element_ty), mask=inside)
    tl.store(out + 1, (n_even * sin + n_odd * cos).to(Out.dtype.element_ty), mask=inside)


def _rows_of(vector: torch.Tensor, batch: int, length: int):
    """A modulation vector (B|1, 1|L, dim) as float32 with its (batch, token) strides; a
    broadcast axis gets stride 0."""
    v = vector.to(torch.float32).contiguous()
    return v, (v.stride(0) if v.shape[0] == batch > 1 else 0), (v.stride(1) if v.shape[1] == length > 1 else 0)


@torch.library.custom_op("parallel_wan::norm_modulate", mutates_args=())
def norm_modulate(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, eps: float) -> torch.Tensor:
    b, length, dim = x.shape
    x = x.contiguous()
    out = torch.empty_like(x)
    scale, s_sb, s_sl = _rows_of(scale, b, length)
    shift, t_sb, t_sl = _rows_of(shift, b, length)
    block = triton.next_power_of_2(dim)
    _norm_modulate_kernel[(b * length,)](
        x, scale, shift, out, length, dim, s_sb, s_sl, t_sb, t_sl, eps, BLOCK_D=block, num_warps=_warps(block)
    )
    return out


@torch.library.custom_op("parallel_wan::gated_residual", mutates_args=())
def gated_residual(x: torch.Tensor, y: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    b, length, dim = x.shape
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    gate, g_sb, g_sl = _rows_of(gate, b, length)
    block = triton.next_power_of_2(dim)
    _gated_residual_kernel[(b * length,)](
        x, y, gate, out, length, dim, g_sb, g_sl, BLOCK_D=block, num_warps=_warps(block)
    )
    return out


@torch.library.custom_op("parallel_wan::rms_norm_rope", mutates_args=())
def rms_norm_rope(
    x: torch.Tensor, weight: torch.Tensor, eps: float, heads: int, cos: torch.Tensor, sin: torch.Tensor
) -> torch.Tensor:
    b, length, dim = x.shape
    x = x.contiguous()
    out = torch.empty(
        (b, length, heads, dim // heads), dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device
    )
    cos, sin = cos.to(torch.float32).contiguous(), sin.to(torch.float32).contiguous()
    block = triton.next_power_of_2(dim // 2)
    _rms_norm_rope_kernel[(b * length,)](
        x, weight.contiguous(), cos, sin, out, length, dim // 2, dim // heads // 2, eps, BLOCK_P=block,
        num_warps=_warps(block),
    )  # fmt: skip
    return out


@norm_modulate.register_fake
def _(x, scale, shift, eps):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@gated_residual.register_fake
def _(x, y, gate):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@rms_norm_rope.register_fake
def _(x, weight, eps, heads, cos, sin):
    b, length, dim = x.shape
    dtype = torch.promote_types(x.dtype, weight.dtype)
    return x.new_empty((b, length, heads, dim // heads), dtype=dtype)
