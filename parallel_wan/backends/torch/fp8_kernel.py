"""Our Triton kernel for FP8 attention (attention_impl=fp8): QKᵀ as an e4m3 × e4m3 product with
one float32 scale per block of queries and per block of keys, and PV with the probabilities and
the values in e4m3 (values with one scale per channel), both summed in float32. The scheme is
SageAttention 2's and FlashAttention 3's FP8 path, written for this project; like our sage
kernel it masks the keys past kv_len exactly and writes each row's log-sum-exp for ring merges.

Inputs come from fp8_attention.py's quantizer:
- q8 (B, S, H, D) and k8 (B, L, H, D), last dim contiguous; q_scale (B, H, ⌈S/BLOCK_M⌉) and
  k_scale (B, H, ⌈L/BLOCK_N⌉) with sm_scale·log2(e) folded into q's, so the dequantized products
  are scores in log2 units and the softmax runs on exp2;
- v8ᵀ (B, H, D, L), keys contiguous: FP8 tensor cores (Hopper's wgmma) take both operands
  K-major, and PV's K is the keys; v_scale (B, H, D).

Accumulation: each tile's two products start from zero and are added to the float32 running
sums here (two levels, as SageAttention 2 does), so Hopper's faster fp8 accumulation (Triton's
default on sm_90: the tensor core's own, about 14 mantissa bits) sums at most D = 128 or
BLOCK_N products — far below e4m3's own 3-bit rounding. The probabilities (≤ 1) are multiplied
by e4m3's largest value (FP8_MAX) before rounding so they use e4m3's whole range, and the factor comes off at the end.

This module imports triton: only the fp8 path imports it. Under TRITON_INTERPRET=1 (set before
import) the kernel runs on CPU tensors: the tests' path (see `_e4m3`).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from ...weights.quantized.scales import FP8_MAX

BLOCK_M = 128  # queries per program, and per q scale
BLOCK_N = 128  # keys per step, and per k scale

# Triton 3.9's interpreter converts float32 to e4m3 wrongly when rounding carries into the
# exponent (0.4868 → 0.25 instead of 0.5; ~5 % of values): the kernel then rounds by hand
# first, to the value the GPU's cvt.rn would give, so the cast is exact. Compiled code casts
# directly. tests/parallel/test_fp8_attention.py checks the rounding against torch's cast.
ROUND_BY_HAND = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _e4m3(x, ROUND_BY_HAND: tl.constexpr):
    """x (float32, within e4m3's range) to float8_e4m3fn, round to nearest even."""
    if ROUND_BY_HAND:
        bits = x.to(tl.uint32, bitcast=True)
        # keep 3 of float32's 23 mantissa bits, ties to even
        normal = ((bits + 0x7FFFF + ((bits >> 20) & 1)) & 0xFFF00000).to(tl.float32, bitcast=True)
        # below 2⁻⁶ e4m3 is subnormal, a grid of 2⁻⁹: adding 1.5·2¹⁴ (whose float32 ulp is 2⁻⁹) rounds to it
        subnormal = (x + 24576.0) - 24576.0
        x = tl.where(tl.abs(x) < 0.015625, subnormal, normal)
    return x.to(tl.float8e4nv)


@triton.jit
def _key_block(
    acc,
    row_sum,
    row_max,
    q,
    q_scale,
    k_ptrs,
    vt_ptrs,
    k_scale_ptr,
    first,
    kv_len,
    BLOCK_N: tl.constexpr,
    PARTIAL: tl.constexpr,
    ROUND_BY_HAND: tl.constexpr,
    P_SCALE: tl.constexpr,
):
    """Folds the keys first .. first + BLOCK_N into one query block's running softmax. Only the
    last block of keys can be PARTIAL: the full ones skip the bounds checks."""
    if PARTIAL:
        inside = (first + tl.arange(0, BLOCK_N)) < kv_len
        keys = tl.load(k_ptrs, mask=inside[:, None], other=0.0)
        values_t = tl.load(vt_ptrs, mask=inside[None, :], other=0.0)
    else:
        keys = tl.load(k_ptrs)
        values_t = tl.load(vt_ptrs)
    scores = tl.dot(q, tl.trans(keys)) * (q_scale * tl.load(k_scale_ptr))
    if PARTIAL:
        scores = tl.where(inside[None, :], scores, float("-inf"))
    # first < kv_len, so every tile has a real key and new_max is finite
    new_max = tl.maximum(row_max, tl.max(scores, axis=1))
    shrink = tl.exp2(row_max - new_max)  # 0 on the first tile (row_max = −inf)
    probs = tl.exp2(scores - new_max[:, None])
    row_sum = row_sum * shrink + tl.sum(probs, axis=1)
    weighted = tl.dot(_e4m3(probs * P_SCALE, ROUND_BY_HAND), tl.trans(values_t))
    acc = acc * shrink[:, None] + weighted
    return acc, row_sum, new_max


@triton.jit
def _fp8_attention(
    Q,
    K,
    Vt,
    Q_scale,
    K_scale,
    V_scale,
    Out,
    Lse,
    qo_len,
    kv_len,
    q_sb,
    q_sl,
    q_sh,
    k_sb,
    k_sl,
    k_sh,
    v_sb,
    v_sh,
    v_sd,
    o_sb,
    o_sl,
    o_sh,
    lse_sb,
    lse_sl,
    lse_sh,
    qs_sb,
    qs_sh,
    ks_sb,
    ks_sh,
    vs_sb,
    vs_sh,
    H: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROUND_BY_HAND: tl.constexpr,
    P_SCALE: tl.constexpr,
):
    """One program: BLOCK_M queries of one (batch, head) against all kv_len keys. q/k/out are
    (B, L, H, D) with the last dim contiguous, vᵀ (B, H, D, L) with the keys contiguous; the _s*
    arguments are the other strides."""
    q_block = tl.program_id(0)
    batch = (tl.program_id(1) // H).to(tl.int64)  # int64: batch × its stride must not wrap at 2³¹
    head = tl.program_id(1) % H
    rows = q_block * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    keys = tl.arange(0, BLOCK_N)

    q = tl.load(
        Q + batch * q_sb + head * q_sh + rows[:, None] * q_sl + dims[None, :], mask=rows[:, None] < qo_len, other=0.0
    )
    q_scale = tl.load(Q_scale + batch * qs_sb + head * qs_sh + q_block)
    k_ptrs = K + batch * k_sb + head * k_sh + keys[:, None] * k_sl + dims[None, :]
    vt_ptrs = Vt + batch * v_sb + head * v_sh + dims[:, None] * v_sd + keys[None, :]
    k_scale_ptr = K_scale + batch * ks_sb + head * ks_sh

    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    row_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
    row_max = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    whole = kv_len - kv_len % BLOCK_N
    for first in range(0, whole, BLOCK_N):
        acc, row_sum, row_max = _key_block(
            acc,
            row_sum,
            row_max,
            q,
            q_scale,
            k_ptrs + first * k_sl,
            vt_ptrs + first,
            k_scale_ptr + first // BLOCK_N,
            first,
            kv_len,
            BLOCK_N,
            False,
            ROUND_BY_HAND,
            P_SCALE,
        )
    if whole < kv_len:
        acc, row_sum, row_max = _key_block(
            acc,
            row_sum,
            row_max,
            q,
            q_scale,
            k_ptrs + whole * k_sl,
            vt_ptrs + whole,
            k_scale_ptr + whole // BLOCK_N,
            whole,
            kv_len,
            BLOCK_N,
            True,
            ROUND_BY_HAND,
            P_SCALE,
        )

    stored = rows < qo_len  # the query block's padding rows exist only here
    v_scale = tl.load(V_scale + batch * vs_sb + head * vs_sh + dims)
    out = acc * (v_scale[None, :] / P_SCALE) / row_sum[:, None]
    o_ptrs = Out + batch * o_sb + head * o_sh + rows[:, None] * o_sl + dims[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=stored[:, None])
    # row_max and log2(row_sum) are in log2 units (the folded log2(e)); ring merges natural logs
    lse = (row_max + tl.log2(row_sum)) * 0.6931471805599453
    tl.store(Lse + batch * lse_sb + head * lse_sh + rows * lse_sl, lse, mask=stored)


def launch_attention(q8, k8, vt8, q_scale, k_scale, v_scale, out_dtype):
    """q8 (B, S, H, D) and k8 (B, L, H, D) e4m3 with their last dims contiguous, vt8 (B, H, D, L)
    e4m3 with the keys contiguous; the scales as fp8_attention.py's quantizer makes them →
    (out (B, S, H, D) in out_dtype, lse (B, S, H) float32, natural log)."""
    batch, qo_len, heads, head_dim = q8.shape
    kv_len = k8.shape[1]
    assert k8.shape[2] == vt8.shape[1] == heads, "one kv head per query head"
    assert q8.stride(-1) == k8.stride(-1) == vt8.stride(-1) == 1
    # the kernel steps the scales by 1 along their last dim
    assert all(s.stride(-1) == 1 or s.shape[-1] == 1 for s in (q_scale, k_scale, v_scale))
    out = torch.empty(q8.shape, dtype=out_dtype, device=q8.device)
    lse = torch.empty(batch, qo_len, heads, dtype=torch.float32, device=q8.device)
    strides = [t.stride(i) for t in (q8, k8) for i in (0, 1, 2)]
    strides += [vt8.stride(i) for i in (0, 1, 2)]
    strides += [t.stride(i) for t in (out, lse) for i in (0, 1, 2)]
    strides += [s.stride(i) for s in (q_scale, k_scale, v_scale) for i in (0, 1)]
    # 128: two warpgroups over the 128 × 128 fp32 accumulator; 3 stages of K/V tiles in flight
    warps, stages = (8, 3) if head_dim == 128 else (4, 3)
    _fp8_attention[(triton.cdiv(qo_len, BLOCK_M), batch * heads)](
        q8,
        k8,
        vt8,
        q_scale,
        k_scale,
        v_scale,
        out,
        lse,
        qo_len,
        kv_len,
        *strides,
        H=heads,
        HEAD_DIM=head_dim,
        BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N,
        ROUND_BY_HAND=ROUND_BY_HAND,
        P_SCALE=FP8_MAX,  # the probabilities (≤ 1) scaled to e4m3's whole range
        num_warps=warps,
        num_stages=stages,
    )
    return out, lse
