"""Local attention for the JAX backend: one function per question the caller asks, the kernel
chosen per platform behind it.

- `attention(q, k, v)` → output only. TPU: Pallas splash attention. GPU: cuDNN flash
  attention through `jax.nn.dot_product_attention` for half-precision inputs (cuDNN has no
  fp32 kernel). CPU (and fp32 on GPU): plain jnp with float32 softmax statistics.
- `attention_with_lse(q, k, v)` → (output, log-sum-exp), both float32, for the ring's merge.
  TPU: splash with `save_residuals` (its log-sum-exp is float32). Elsewhere plain jnp:
  cuDNN's residual comes back in the inputs' dtype, and a bf16 log-sum-exp (8 bits of
  mantissa on a value ~10) would weight the ring's blocks with percent-level errors.

Layouts are (batch, tokens, heads, head_dim); log-sum-exp is (batch, tokens, heads).

No registry like the torch backend's kernels (backends/torch/kernels/): no setting picks a JAX
kernel (attention_impl is refused on JAX: backends/capabilities.py `attention_kernels`), so the
choice is the platform's, in `_choose`; `kernel=` forces one for tests only.

Sequence padding sits at the END of the global sequence (see sequence_parallel.py), so the
keys to drop are exactly those at global positions ≥ `valid_keys`. A ring's block masks them
by position (`key_offset` is the global position of the block's first key and may be traced;
shapes are static in JAX). Masked logits get a finite, hugely negative value rather than -inf:
a block whose keys are all padding then gives a finite log-sum-exp near -1e30 whose merge
weight, exp(-1e30 - lse), is exactly 0, with no inf - inf = NaN on the way. Where every key is
on hand (`attention`: one device, Ulysses) the plain jnp kernel slices the padding off instead,
so it sums over the one-device run's keys exactly.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from . import target_platform

KERNELS = ("auto", "jnp", "cudnn", "splash")

# Finite "minus infinity" for masked logits (see the module docstring). exp(MASK_VALUE - m)
# underflows to exactly 0 in float32 for any real logit m.
MASK_VALUE = -1e30

# Splash attention tiles the sequence in blocks of 128 lanes; inputs are padded to a multiple.
_SPLASH_LANES = 128


def attention(q, k, v, scale: float | None = None, valid_keys: int | None = None, kernel: str = "auto"):
    """softmax(q·kᵀ·scale)·v over all keys, or the first `valid_keys` of them; result in q's
    dtype. `kernel` forces an implementation ("jnp", "cudnn", "splash"; "splash" off TPU runs
    Pallas in interpret mode, which is how CPU tests exercise the TPU path)."""
    scale = _scale(q, scale)
    choice = _choose(kernel, q, need_lse=False)
    if choice == "splash":
        out, _ = _splash(q, k, v, scale, valid_keys, 0, need_lse=False)
        return out
    if choice == "cudnn":
        lengths = None
        if valid_keys is not None and valid_keys < k.shape[1]:
            lengths = jnp.full((q.shape[0],), valid_keys, jnp.int32)
        return jax.nn.dot_product_attention(q, k, v, scale=scale, key_value_seq_lengths=lengths, implementation="cudnn")
    if valid_keys is not None and valid_keys < k.shape[1]:
        # The padding's keys are dropped (all keys are here, from position 0), not masked: with
        # 3 masked keys more (45 tokens padded to 48) the sums ran over another length, in
        # another order, and a padded Ulysses mesh drifted from one device in bf16.
        k, v = k[:, :valid_keys], v[:, :valid_keys]
    out, _ = _jnp_attention(q, k, v, scale, None)
    return rounded(out, q.dtype)


def rounded(out, dtype):
    """A float32 attention output in the inputs' `dtype`, rounded for certain, as the fused
    kernels (splash, cuDNN) return theirs. A plain cast is not enough: where the next op widens
    the value again (the output projection's GEMM runs in float32 on the CPU), XLA drops the
    cast pair (it allows excess precision) — on one device, but not where a bf16 all-to-all
    comes first (Ulysses), so one device's video drifted from every Ulysses mesh's by as much
    as bf16 costs (tests/parallel/test_bf16_meshes.py). `reduce_precision` is never dropped."""
    if out.dtype == dtype:
        return out
    info = jnp.finfo(dtype)
    return jax.lax.reduce_precision(out, exponent_bits=info.nexp, mantissa_bits=info.nmant).astype(dtype)


def attention_with_lse(
    q, k, v, scale: float | None = None, valid_keys: int | None = None, key_offset=0, kernel: str = "auto"
):
    """(out, lse) in float32 for one block of keys whose first key sits at global position
    `key_offset`; keys at positions ≥ `valid_keys` are masked."""
    scale = _scale(q, scale)
    if _choose(kernel, q, need_lse=True) == "splash":
        out, lse = _splash(q, k, v, scale, valid_keys, key_offset, need_lse=True)
        return out.astype(jnp.float32), lse
    return _jnp_attention(q, k, v, scale, _key_mask(k.shape[1], valid_keys, key_offset))


def merge(out_a, lse_a, out_b, lse_b):
    """Combine two partial attentions over disjoint key sets (flash-attention's rescale):
    out = Σ exp(lse_i - lse)·out_i with lse = log Σ exp(lse_i). All float32."""
    lse = jnp.logaddexp(lse_a, lse_b)
    out = out_a * jnp.exp(lse_a - lse)[..., None] + out_b * jnp.exp(lse_b - lse)[..., None]
    return out, lse


# ---------------------------------------------------------------- choice
def _scale(q, scale):
    return float(q.shape[-1]) ** -0.5 if scale is None else float(scale)


def _choose(kernel: str, q, need_lse: bool) -> str:
    if kernel not in KERNELS:
        raise ValueError(f"attention kernel {kernel!r} is not one of {', '.join(KERNELS)}; use 'auto'")
    if kernel == "cudnn" and need_lse:
        raise ValueError(
            "attention kernel 'cudnn' cannot serve ring attention: its log-sum-exp comes back in the "
            "inputs' dtype, too coarse to merge blocks; use kernel='auto' (jnp on GPU) or 'jnp'"
        )
    if kernel != "auto":
        return kernel
    platform = target_platform.current()
    if platform == "tpu":
        return "splash"
    if platform in ("gpu", "cuda", "rocm") and not need_lse and q.dtype in (jnp.bfloat16, jnp.float16):
        return "cudnn"
    return "jnp"


def _key_mask(length: int, valid_keys: int | None, key_offset):
    """Boolean (length,) of keys to keep, or None when nothing can be padding."""
    if valid_keys is None:
        return None
    if isinstance(key_offset, (int, np.integer)) and key_offset + length <= valid_keys:
        return None
    return key_offset + jnp.arange(length) < valid_keys


# ---------------------------------------------------------------- plain jnp
def _jnp_attention(q, k, v, scale: float, key_mask):
    """Materialises the (B·H, S, L) logits in float32; for CPU and for shapes the fused
    kernels refuse.

    Batch and heads are folded into one batch dim of the two dots, so a row's numbers do not
    depend on how many rows and heads a device holds. With (b, h) as two batch dims, XLA drops
    a dim of size 1 (a CFG half alone under dp, one head per device under Ulysses 8) and gives
    the dot another operand layout, which XLA:CPU sums in another order: that device's float32
    attention differed in the last bits from one device's, and in bfloat16 the video drifted
    (tests/parallel/test_bf16_meshes.py). A folded batch of 1 keeps the layout."""
    b, s, h, d = q.shape

    def heads_first(x):  # (B, n, H, D) → (B·H, n, D)
        return jnp.reshape(jnp.transpose(x, (0, 2, 1, 3)), (b * h, x.shape[1], d))

    logits = jnp.einsum("nsd,nld->nsl", heads_first(q), heads_first(k), preferred_element_type=jnp.float32) * scale
    if key_mask is not None:
        logits = jnp.where(key_mask, logits, MASK_VALUE)
    peak = jnp.max(logits, axis=-1, keepdims=True)
    weights = jnp.exp(logits - peak)
    total = jnp.sum(weights, axis=-1, keepdims=True)
    out = jnp.einsum("nsl,nld->nsd", weights, heads_first(v).astype(jnp.float32)) / total
    out = jnp.transpose(jnp.reshape(out, (b, h, s, d)), (0, 2, 1, 3))
    lse = jnp.transpose(jnp.reshape(peak + jnp.log(total), (b, h, s)), (0, 2, 1))
    return out, lse


# ---------------------------------------------------------------- Pallas splash (TPU)
def _block(n: int) -> int:
    return next(b for b in (512, 256, _SPLASH_LANES) if n % b == 0)


@functools.lru_cache(maxsize=64)
def _splash_kernel(heads: int, q_len: int, kv_len: int, need_lse: bool, interpret: bool):
    from jax.experimental.pallas.ops.tpu.splash_attention import (
        splash_attention_kernel as sk,
        splash_attention_mask as sm,
    )

    bq, bkv = _block(q_len), _block(kv_len)
    return sk.make_splash_mha(
        mask=sm.MultiHeadMask([sm.FullMask((q_len, kv_len))] * heads),
        head_shards=1,
        q_seq_shards=1,
        block_sizes=sk.BlockSizes(block_q=bq, block_kv=bkv, block_kv_compute=bkv),
        save_residuals=need_lse,
        interpret=interpret,
    )


def _splash(q, k, v, scale: float, valid_keys, key_offset, need_lse: bool):
    """Splash attention with batch folded into heads and both sequences padded to whole
    128-lane blocks. Padded and invalid keys are masked through segment ids (q: 0, kv: 1 for
    a dropped key), the one dynamic mask splash accepts."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk

    b, s, h, d = q.shape
    kv_len = k.shape[1]
    sp, lp = -(-s // _SPLASH_LANES) * _SPLASH_LANES, -(-kv_len // _SPLASH_LANES) * _SPLASH_LANES

    def heads_first(x, n):
        x = jnp.transpose(x, (0, 2, 1, 3)).reshape(b * h, x.shape[1], d)
        return jnp.pad(x, ((0, 0), (0, n - x.shape[1]), (0, 0)))

    qh = heads_first((q.astype(jnp.float32) * scale).astype(q.dtype), sp)
    kh, vh = heads_first(k, lp), heads_first(v, lp)
    keep = jnp.arange(lp) < kv_len
    if valid_keys is not None:
        keep = keep & (key_offset + jnp.arange(lp) < valid_keys)
    segments = sk.SegmentIds(q=jnp.zeros((sp,), jnp.int32), kv=jnp.where(keep, 0, 1).astype(jnp.int32))
    kernel = _splash_kernel(b * h, sp, lp, need_lse, target_platform.current() != "tpu")
    result = kernel(qh, kh, vh, segment_ids=segments)
    out, lse = (result[0], result[1][0]) if need_lse else (result, None)
    out = jnp.transpose(out[:, :s].reshape(b, h, s, d), (0, 2, 1, 3))
    if lse is not None:
        lse = jnp.transpose(lse[:, :s].reshape(b, h, s), (0, 2, 1)).astype(jnp.float32)
    return out, lse
