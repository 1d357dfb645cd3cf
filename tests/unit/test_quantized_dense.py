"""ops.dense: a quantized weight (int8 / float8 with its weight_scale) is widened exactly as
W = q · scale in float32 — per output channel (G = 1) and per block of inputs (G > 1) — on both
backends, and a fused q‖k‖v keeps each row's scale."""

import numpy as np
import pytest
import torch

from parallel_wan.backends.torch import ops as torch_ops
from parallel_wan.backends.torch.qkv_fusion import fuse_block_qkv


def _quantized(rows, cols, groups, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype is torch.int8:
        q = torch.randint(-127, 128, (rows, cols), generator=g, dtype=torch.int8)
    else:
        q = (torch.randn(rows, cols, generator=g) * 100).clamp(-448, 448).to(dtype)
    scale = torch.rand(rows, groups, generator=g) * 0.01 + 1e-3
    return q, scale


def _reference(q, scale):
    """The dequantization written out element by element: W[o, i] = q[o, i] · s[o, i // (in / G)]."""
    rows, cols = q.shape
    block = cols // scale.shape[1]
    index = torch.arange(cols) // block
    return q.to(torch.float32) * scale[:, index]


@pytest.mark.parametrize("dtype", [torch.int8, torch.float8_e4m3fn])
@pytest.mark.parametrize("groups", [1, 4])
def test_torch_dense_widens_exactly(dtype, groups):
    q, scale = _quantized(12, 16, groups, dtype)
    x = torch.randn(3, 5, 16)
    bias = torch.randn(12)
    got = torch_ops.dense(x, {"weight": q, "weight_scale": scale, "bias": bias})
    want = torch.nn.functional.linear(x, _reference(q, scale), bias)
    assert torch.equal(got, want)
    assert torch.equal(
        torch_ops.dense(x, {"weight": want.new_ones(12, 16), "bias": bias}),
        torch.nn.functional.linear(x, want.new_ones(12, 16), bias),
    )


@pytest.mark.parametrize("dtype", [torch.int8, torch.float8_e4m3fn])
@pytest.mark.parametrize("groups", [1, 4])
def test_jax_dense_widens_as_torch_does(dtype, groups):
    import jax.numpy as jnp
    import ml_dtypes

    from parallel_wan.backends.jax import ops as jax_ops

    q, scale = _quantized(12, 16, groups, dtype, seed=1)
    x = torch.randn(3, 5, 16)
    bias = torch.randn(12)
    q_np = q.numpy() if dtype is torch.int8 else q.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
    widened = jax_ops.widen(jnp.asarray(q_np), jnp.asarray(scale.numpy()), jnp.float32)
    assert np.array_equal(np.asarray(widened), _reference(q, scale).numpy())
    got = jax_ops.dense(
        jnp.asarray(x.numpy()),
        {"weight": jnp.asarray(q_np), "weight_scale": jnp.asarray(scale.numpy()), "bias": jnp.asarray(bias.numpy())},
    )
    want = torch.nn.functional.linear(x, _reference(q, scale), bias).numpy()
    np.testing.assert_allclose(
        np.asarray(got), want, rtol=1e-5, atol=1e-5
    )  # XLA's CPU dot vs torch's: fp32 summation order


def test_fused_qkv_keeps_each_rows_scale():
    parts = {
        name: dict(zip(("weight", "weight_scale"), _quantized(8, 16, 1, torch.int8, seed=i)), bias=torch.randn(8))
        for i, name in enumerate(("to_q", "to_k", "to_v"))
    }
    block = {"attn1": parts}
    fused = fuse_block_qkv(block)["attn1"]["to_qkv"]
    x = torch.randn(2, 16)
    separate = torch.cat([torch_ops.dense(x, parts[n]) for n in ("to_q", "to_k", "to_v")], dim=-1)
    torch.testing.assert_close(
        torch_ops.dense(x, fused), separate, rtol=1e-6, atol=1e-6
    )  # one GEMM vs three: rounding only


@pytest.mark.parametrize("kind", ["fp8", "int8"])
def test_quantize_rows_is_per_channel_absmax_and_dense_widens_it(kind):
    from parallel_wan.weights.quantized.form import LIMIT, dequantize, quantize_rows

    w = torch.randn(6, 32)
    w[2] = 0  # an all-zero row: scale 1, not a division by zero
    q, scale = quantize_rows(w, kind)
    assert q.dtype is (torch.float8_e4m3fn if kind == "fp8" else torch.int8) and scale.shape == (6, 1)
    assert scale[2].item() == 1.0 and not q[2].to(torch.float32).any()
    assert torch.equal(q.to(torch.float32).abs().amax(dim=1)[[0, 1, 3, 4, 5]], torch.full((5,), LIMIT[q.dtype]))
    step = 1 / 127 if kind == "int8" else 1 / 16  # int8: half a level; e4m3: 3 mantissa bits → ≤ 2⁻⁴ relative
    assert ((dequantize(q, scale) - w).abs() <= step * w.abs().amax(1, keepdim=True)).all()
    x = torch.randn(4, 32)
    assert torch.equal(torch_ops.dense(x, {"weight": q, "weight_scale": scale}), x @ dequantize(q, scale).T)
