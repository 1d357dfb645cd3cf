"""Our Triton block-sparse flash-attention kernel: each program takes one block of queries of
one (batch, head) and folds in only the key blocks its row of the block mask visits (a list
of global key-block indices and a count, parallel/block_visits.py), with an online softmax.

What a sequence-parallel run needs of it, as of every kernel here (sage_kernel.py is the model):
- keys past the call's valid keys score −inf, so padding changes nothing, exactly;
- each row's log-sum-exp (natural log, float32) is returned, over the keys it visited, which
  ring attention merges by; a row that visits no key gets out = 0 and lse = −inf (a ring step
  whose key blocks this rank's queries never see contributes nothing);
- blocks are GLOBAL: query block g covers global positions [g·BLOCK, (g+1)·BLOCK), of which
  the call holds those in [q_start, q_start + q_len) — a rank's slice need not start on a
  block boundary; the same for keys from k_start. So the mask means the same on every mesh.

Inputs are float32, bfloat16 or float16: QKᵀ and PV multiply in the inputs' dtype with float32
sums (float32 inputs in IEEE float32, not TF32: the tests compare meshes at 1e-5). head_dim
is padded to a power of two inside the kernel (tl.arange's rule); the padding is masked.

This module imports triton: only the sparse path imports it (sparse_attention.py). Under
TRITON_INTERPRET=1 (set before import) it runs on CPU tensors: the tests' path.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _block_sparse_attention(
    Q,
    K,
    V,
    Out,
    Lse,
    Table,
    Counts,
    q_len,
    kv_len,
    q_start,
    k_start,
    first_block,
    table_width,
    scale_log2,
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
    H: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    DIM: tl.constexpr,
    BLOCK: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """One program: the call's queries in global block first_block + program_id(0) of one
    (batch, head) against the key blocks Table[program_id(0), :count]. Tensors are (B, L, H, D)
    with the last dim contiguous; the _s* arguments are the other strides (b, l, h)."""
    p = tl.program_id(0)
    batch = (tl.program_id(1) // H).to(tl.int64)  # int64: batch × its stride must not wrap at 2³¹
    head = tl.program_id(1) % H
    rows = (first_block + p) * BLOCK - q_start + tl.arange(0, BLOCK)  # the call's own positions
    row_ok = (rows >= 0) & (rows < q_len)
    dims = tl.arange(0, DIM)
    dim_ok = dims < HEAD_DIM
    q = tl.load(
        Q + batch * q_sb + head * q_sh + rows[:, None] * q_sl + dims[None, :],
        mask=row_ok[:, None] & dim_ok[None, :],
        other=0.0,
    )
    k_base = K + batch * k_sb + head * k_sh + dims[None, :]
    v_base = V + batch * v_sb + head * v_sh + dims[None, :]

    acc = tl.zeros([BLOCK, DIM], dtype=tl.float32)
    row_sum = tl.zeros([BLOCK], dtype=tl.float32)
    row_max = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    count = tl.load(Counts + p)
    for i in range(0, count):
        key_block = tl.load(Table + p * table_width + i)
        keys = key_block * BLOCK - k_start + tl.arange(0, BLOCK)
        key_ok = (keys >= 0) & (keys < kv_len)  # another rank's keys, or padding: −inf
        tile = key_ok[:, None] & dim_ok[None, :]
        k = tl.load(k_base + keys[:, None] * k_sl, mask=tile, other=0.0)
        v = tl.load(v_base + keys[:, None] * v_sl, mask=tile, other=0.0)
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2
        scores = tl.where(key_ok[None, :], scores, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(scores, axis=1))
        # A row with no real key yet keeps max −inf; measuring from 0 there keeps exp2 at 0, not NaN.
        base = tl.where(new_max == float("-inf"), 0.0, new_max)
        shrink = tl.exp2(row_max - base)
        probs = tl.exp2(scores - base[:, None])
        row_sum = row_sum * shrink + tl.sum(probs, axis=1)
        acc = tl.dot(probs.to(v.dtype), v, acc * shrink[:, None], input_precision=PRECISION)
        row_max = new_max

    seen = row_sum > 0
    out = acc / tl.where(seen, row_sum, 1.0)[:, None]
    o_ptrs = Out + batch * o_sb + head * o_sh + rows[:, None] * o_sl + dims[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=row_ok[:, None] & dim_ok[None, :])
    # row_max is in log2 units (scale_log2 folds log2 e); ring merges natural logs
    lse = tl.where(seen, (row_max + tl.log2(tl.where(seen, row_sum, 1.0))) * 0.6931471805599453, float("-inf"))
    tl.store(Lse + batch * lse_sb + head * lse_sh + rows * lse_sl, lse, mask=row_ok)


def launch(q, k, v, table, counts, first_block: int, q_start: int, k_start: int, kv_len: int, block: int, scale):
    """q (B, S, H, D), k/v (B, L, H, D) with contiguous last dims; table (nq, width) and counts
    (nq,) int32 on q's device (Visits) → (out (B, S, H, D) in q's dtype, lse (B, S, H) float32).
    One torch custom op (`block_sparse_attention`): under FakeTensorMode (the fake-GPU tests) it
    makes its outputs without launching."""
    return block_sparse_attention(q, k, v, table, counts, first_block, q_start, k_start, kv_len, block, float(scale))


@torch.library.custom_op("parallel_wan::block_sparse_attention", mutates_args=())
def block_sparse_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    table: torch.Tensor,
    counts: torch.Tensor,
    first_block: int,
    q_start: int,
    k_start: int,
    kv_len: int,
    block: int,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    batch, q_len, heads, head_dim = q.shape
    assert k.shape[2] == v.shape[2] == heads, "one kv head per query head"
    assert q.stride(-1) == k.stride(-1) == v.stride(-1) == 1
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(batch, q_len, heads, dtype=torch.float32, device=q.device)
    strides = [t.stride(i) for t in (q, k, v, out, lse) for i in (0, 1, 2)]
    dim = triton.next_power_of_2(head_dim)
    precision = "ieee" if q.dtype == torch.float32 else "tf32"  # tf32 is ignored for 16-bit inputs
    _block_sparse_attention[(table.shape[0], batch * heads)](
        q,
        k,
        v,
        out,
        lse,
        table,
        counts,
        q_len,
        kv_len,
        q_start,
        k_start,
        first_block,
        table.shape[1],
        float(scale) * 1.4426950408889634,  # log2(e): the softmax runs on exp2
        *strides,
        H=heads,
        HEAD_DIM=head_dim,
        DIM=dim,
        BLOCK=block,
        PRECISION=precision,
        **launch_options(block, dim),
    )
    return out, lse


@block_sparse_attention.register_fake
def _(q, k, v, table, counts, first_block, q_start, k_start, kv_len, block, scale):
    batch, q_len, heads, _ = q.shape
    return torch.empty_like(q, memory_format=torch.contiguous_format), q.new_empty(
        (batch, q_len, heads), dtype=torch.float32
    )


def launch_options(block: int, dim: int) -> dict:
    """Warps and pipeline stages: 8 warps for a 128 × 128 fp32 accumulator, 4 below; two stages
    of K/V tiles in flight (the key blocks are gathered, not streamed)."""
    return {"num_warps": 8 if block * dim >= 128 * 128 else 4, "num_stages": 2}
