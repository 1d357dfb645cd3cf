"""Our Triton kernel for SageAttention's scheme: QKᵀ as an int8 × int8 → int32 product scaled
back by one float32 scale per block of queries and per block of keys (the keys smoothed by their
mean beforehand, sage_attention.py), and PV with the probabilities and values in fp16, summed in
float32. Written for this project from the scheme's description; it adds the two things the
kernel of `sageattention` 1.0.6 lacks and a sequence-parallel run needs:
- keys past kv_len in a partial last block score −inf, so padding changes nothing (scored 0
  instead, they add exp2(0 − m) to every row's denominator: 0.14 relative error at 100 keys,
  0.37 at 65; A14B 720p × 81 has 75600 tokens, 75600 % 64 = 16);
- each row's log-sum-exp (natural log, float32) is returned, which ring attention merges by.

The scales come from Sage's own quantizer (`sageattention.quant_per_block.per_block_int8`,
NHD layout): shape (B, H, blocks, 1), one per BLOCK_M queries / BLOCK_N keys, with
sm_scale·log2(e) folded into q's, so the dequantized products are scores in log2 units and the
softmax runs on exp2.

This module imports triton: only the sage path imports it (sage_attention.py). Under
TRITON_INTERPRET=1 (set before import) the kernel runs on CPU tensors: the tests' path.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_M = 128  # queries per program, and per q scale (the quantizer's BLKQ)
BLOCK_N = 64  # keys per step, and per k scale (the quantizer's BLKK)


@triton.jit
def _key_block(
    acc,
    row_sum,
    row_max,
    q,
    q_scale,
    k_ptrs,
    v_ptrs,
    k_scale_ptr,
    first,
    kv_len,
    BLOCK_N: tl.constexpr,
    PARTIAL: tl.constexpr,
):
    """Folds the keys first .. first + BLOCK_N into one query block's running softmax. Only the
    last block of keys can be PARTIAL: the full ones skip the bounds checks."""
    if PARTIAL:
        inside = (first + tl.arange(0, BLOCK_N)) < kv_len
        keys = tl.load(k_ptrs, mask=inside[:, None], other=0)
        values = tl.load(v_ptrs, mask=inside[:, None], other=0.0)
    else:
        keys = tl.load(k_ptrs)
        values = tl.load(v_ptrs)
    # int32 exactly, then one float multiply: the two scales are constant over the tile
    scores = tl.dot(q, tl.trans(keys)).to(tl.float32) * (q_scale * tl.load(k_scale_ptr))
    if PARTIAL:
        scores = tl.where(inside[None, :], scores, float("-inf"))
    # first < kv_len, so every tile has a real key and new_max is finite
    new_max = tl.maximum(row_max, tl.max(scores, axis=1))
    shrink = tl.exp2(row_max - new_max)  # 0 on the first tile (row_max = −inf)
    probs = tl.exp2(scores - new_max[:, None])
    row_sum = row_sum * shrink + tl.sum(probs, axis=1)
    acc = tl.dot(probs.to(tl.float16), values, acc * shrink[:, None])
    return acc, row_sum, new_max


@triton.jit
def _int8_attention(
    Q,
    K,
    V,
    Q_scale,
    K_scale,
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
    v_sl,
    v_sh,
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
    H: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """One program: BLOCK_M queries of one (batch, head) against all kv_len keys. Tensors are
    (B, L, H, D) with the last dim contiguous; the _s* arguments are the other strides (b, l, h)."""
    q_block = tl.program_id(0)
    batch = (tl.program_id(1) // H).to(tl.int64)  # int64: batch × its stride must not wrap at 2³¹
    head = tl.program_id(1) % H
    rows = q_block * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    keys = tl.arange(0, BLOCK_N)

    q_ptrs = Q + batch * q_sb + head * q_sh + rows[:, None] * q_sl + dims[None, :]
    q = tl.load(q_ptrs, mask=rows[:, None] < qo_len, other=0)
    q_scale = tl.load(Q_scale + batch * qs_sb + head * qs_sh + q_block)
    k_ptrs = K + batch * k_sb + head * k_sh + keys[:, None] * k_sl + dims[None, :]
    v_ptrs = V + batch * v_sb + head * v_sh + keys[:, None] * v_sl + dims[None, :]
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
            v_ptrs + first * v_sl,
            k_scale_ptr + first // BLOCK_N,
            first,
            kv_len,
            BLOCK_N,
            False,
        )
    if whole < kv_len:
        acc, row_sum, row_max = _key_block(
            acc,
            row_sum,
            row_max,
            q,
            q_scale,
            k_ptrs + whole * k_sl,
            v_ptrs + whole * v_sl,
            k_scale_ptr + whole // BLOCK_N,
            whole,
            kv_len,
            BLOCK_N,
            True,
        )

    stored = rows < qo_len  # the query block's padding rows exist only here
    out = acc / row_sum[:, None]
    o_ptrs = Out + batch * o_sb + head * o_sh + rows[:, None] * o_sl + dims[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=stored[:, None])
    # row_max and log2(row_sum) are in log2 units (the folded log2(e)); ring merges natural logs
    lse = (row_max + tl.log2(row_sum)) * 0.6931471805599453
    tl.store(Lse + batch * lse_sb + head * lse_sh + rows * lse_sl, lse, mask=stored)


def launch_attention(q_int8, k_int8, v, q_scale, k_scale, out_dtype):
    """q_int8 (B, S, H, D), k_int8 and v (fp16) (B, L, H, D), last dims contiguous; the scales as
    per_block_int8 returns them (blocks of BLOCK_M queries / BLOCK_N keys) → (out (B, S, H, D) in
    out_dtype, lse (B, S, H) float32, natural log)."""
    batch, qo_len, heads, head_dim = q_int8.shape
    kv_len = k_int8.shape[1]
    assert k_int8.shape[2] == v.shape[2] == heads, "one kv head per query head"
    assert q_int8.stride(-1) == k_int8.stride(-1) == v.stride(-1) == 1
    assert q_scale.stride(2) == k_scale.stride(2) == 1  # the kernel steps blocks by 1
    out = torch.empty(q_int8.shape, dtype=out_dtype, device=q_int8.device)
    lse = torch.empty(batch, qo_len, heads, dtype=torch.float32, device=q_int8.device)
    strides = [t.stride(i) for t in (q_int8, k_int8, v, out, lse) for i in (0, 1, 2)]
    strides += [s.stride(i) for s in (q_scale, k_scale) for i in (0, 1)]
    # 128: two warpgroups over the 128 × 128 fp32 accumulator, and 4 stages of K/V tiles in flight
    warps, stages = (8, 4) if head_dim == 128 else (4, 3)
    _int8_attention[(triton.cdiv(qo_len, BLOCK_M), batch * heads)](
        q_int8,
        k_int8,
        v,
        q_scale,
        k_scale,
        out,
        lse,
        qo_len,
        kv_len,
        *strides,
        H=heads,
        HEAD_DIM=head_dim,
        BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N,
        num_warps=warps,
        num_stages=stages,
    )
    return out, lse
