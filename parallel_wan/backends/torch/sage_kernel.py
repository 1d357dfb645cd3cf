"""SageAttention's attention kernel (int8 QKᵀ, 16-bit PV) with the two things a sequence-parallel
run needs that `sageattention` 1.0.6's own kernel lacks: keys past the block's length masked
out, and the log-sum-exp returned.

Derived from `_attn_fwd` in sageattention 1.0.6's attn_qk_int8_per_block.py (BSD-3-Clause,
© 2024 Jintao Zhang, Haofeng Huang). Changes, both needed for exact results:
- Keys in the last block beyond kv_len score -inf. Sage's kernel loads them as zeros and scores
  them 0, so they add exp2(0 − m) to the softmax's denominator: measured under the Triton
  interpreter, rel. error 0.14 at 100 keys and 0.37 at 65 (kv_len % 64 ≠ 0; A14B 720p×81 has
  75600 tokens, 75600 % 64 = 16).
- The row's log-sum-exp (natural log) is written to Lse, so ring attention can merge blocks.
The quantization is Sage's own kernel (`sageattention.quant_per_block.per_block_int8`: per
block of 128 queries / 64 keys, one float32 scale each, sm_scale·log2(e) folded into q), so
scores here are in log2 units, as in Sage.

This module imports triton: only the sage path imports it (sage_attention.py). Under
TRITON_INTERPRET=1 (set before import) the same kernel runs on CPU tensors: the tests' path.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_M = 128  # queries per program: Sage's BLKQ, the q-scale block
BLOCK_N = 64  # keys per step: Sage's BLKK, the k-scale block


@triton.jit
def _sage_fwd(Q, K, V, Q_scale, K_scale, Out, Lse,
              stride_qz, stride_qh, stride_qn,
              stride_kz, stride_kh, stride_kn,
              stride_vz, stride_vh, stride_vn,
              stride_oz, stride_oh, stride_on,
              stride_lz, stride_lh, stride_ln,
              qo_len, kv_len, H: tl.constexpr,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    off_h = tl.program_id(1).to(tl.int64)
    off_z = tl.program_id(2).to(tl.int64)

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, HEAD_DIM)
    q_ptrs = Q + off_z * stride_qz + off_h * stride_qh + offs_m[:, None] * stride_qn + offs_k[None, :]
    k_ptrs = K + off_z * stride_kz + off_h * stride_kh + offs_n[None, :] * stride_kn + offs_k[:, None]
    v_ptrs = V + off_z * stride_vz + off_h * stride_vh + offs_n[:, None] * stride_vn + offs_k[None, :]
    q_scale = tl.load(Q_scale + (off_z * H + off_h) * tl.cdiv(qo_len, BLOCK_M) + start_m)
    k_scale_ptr = K_scale + (off_z * H + off_h) * tl.cdiv(kv_len, BLOCK_N)

    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    q = tl.load(q_ptrs, mask=offs_m[:, None] < qo_len, other=0)
    for start_n in range(0, kv_len, BLOCK_N):
        real = offs_n < kv_len - start_n
        k = tl.load(k_ptrs, mask=real[None, :], other=0)
        k_scale = tl.load(k_scale_ptr)
        qk = tl.dot(q, k).to(tl.float32) * q_scale * k_scale
        qk = tl.where(real[None, :], qk, float("-inf"))  # the fix: padding keys weigh nothing
        m_ij = tl.maximum(m_i, tl.max(qk, 1))  # finite: every step has ≥ 1 real key
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(v_ptrs, mask=real[:, None], other=0)
        acc += tl.dot(p.to(tl.float16), v, out_dtype=tl.float16)  # Sage's fp16 PV, fp16 accumulate per step
        m_i = m_ij
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
        k_scale_ptr += 1
    acc = acc / l_i[:, None]
    o_ptrs = Out + off_z * stride_oz + off_h * stride_oh + offs_m[:, None] * stride_on + offs_k[None, :]
    tl.store(o_ptrs, acc.to(Out.type.element_ty), mask=offs_m[:, None] < qo_len)
    lse_ptrs = Lse + off_z * stride_lz + off_h * stride_lh + offs_m * stride_ln
    tl.store(lse_ptrs, (m_i + tl.math.log2(l_i)) * 0.6931471805599453, mask=offs_m < qo_len)  # log2 → ln


def launch_attention(q_int8, k_int8, v, q_scale, k_scale, out_dtype):
    """Attention of (B, S, H, D) int8 queries over (B, L, H, D) int8 keys and 16-bit values, with
    Sage's per-block scales: (out (B, S, H, D) in out_dtype, lse (B, S, H) float32, natural log)."""
    b, s, h, d = q_int8.shape
    length = k_int8.shape[1]
    out = torch.empty((b, s, h, d), dtype=out_dtype, device=q_int8.device)
    lse = torch.empty((b, s, h), dtype=torch.float32, device=q_int8.device)
    grid = (triton.cdiv(s, BLOCK_M), h, b)
    _sage_fwd[grid](
        q_int8, k_int8, v, q_scale, k_scale, out, lse,
        q_int8.stride(0), q_int8.stride(2), q_int8.stride(1),
        k_int8.stride(0), k_int8.stride(2), k_int8.stride(1),
        v.stride(0), v.stride(2), v.stride(1),
        out.stride(0), out.stride(2), out.stride(1),
        lse.stride(0), lse.stride(2), lse.stride(1),
        s, length, h,
        HEAD_DIM=d, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
        num_warps=4 if d == 64 else 8, num_stages=3 if d == 64 else 4)  # Sage's launch settings
    return out, lse
