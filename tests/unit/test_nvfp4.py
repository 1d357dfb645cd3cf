"""NVFP4's arithmetic (weights/quantized/nvfp4.py) and the FP4 GEMM layer (backends/torch/fp4_gemm.py).

torch 2.13 has no CPU kernel for FP4 `_scaled_mm` (CUDA sm_100+ only), so the GEMM layer is run
here against a stand-in written from the op's contract: the meta kernel checks the operands
(fp4x2 dtypes, A row-major, B column-major, swizzled e4m3 scale sizes — what FakeTensorMode and
the B200 enforce), then the product is computed in float64 from the packed codes and the scale
tables unswizzled by the harness's own loop (tests/harness/fp4_stand_in.py)."""

import pytest
import torch
from harness.fp4_stand_in import scaled_mm_fp4
from harness.quantized_files import E2M1, swizzled

from parallel_wan.backends.torch import fp4_gemm, fp8_gemm, ops as torch_ops
from parallel_wan.weights.quantized import nvfp4

GRID = torch.cat([E2M1, -E2M1])  # every e2m1 value, by code (0..15)


def test_codes_are_the_nearest_e2m1_ties_to_even():
    x = torch.cat([torch.randn(20_000) * 3, torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -2.5, 9.0])])
    code = nvfp4.codes(x)
    assert torch.equal(nvfp4.values(code), GRID[code.long()])
    err = (x - GRID[code.long()]).abs()
    assert torch.equal(err, (x[:, None] - GRID[None]).abs().min(dim=1).values)  # the nearest
    ties = code[-9:].tolist()  # on a midpoint: the code with mantissa 0 (even); beyond 6: saturated
    assert ties == [0, 2, 2, 4, 4, 6, 6, 12, 7]
    packed = nvfp4.pack(code[:16].reshape(2, 8))
    assert torch.equal(packed & 0x0F, code[:16].reshape(2, 8)[:, 0::2])  # element 2j low
    assert torch.equal(nvfp4.unpack(packed), GRID[code[:16].long()].reshape(2, 8))


def test_block_scales_swizzle_as_cublas_lays_them_out():
    table = torch.randn(300, 6)  # rows and blocks not whole tiles: padded with zeros
    blocked = nvfp4.to_blocked(table)
    assert blocked.shape == nvfp4.blocked_shape(300, 6) == (384, 8)
    assert torch.equal(blocked, swizzled(table))
    assert torch.equal(nvfp4.from_blocked(blocked, 300, 6), table)
    for begin, end in ((0, 300), (100, 260), (130, 131)):  # a sharded load's rows: only their tiles
        assert torch.equal(nvfp4.blocked_rows(blocked, 300, 6, begin, end), table[begin:end])


def test_the_quantization_error_of_a_gaussian_weight():
    """e2m1 has 8 magnitudes; with each block of 16 scaled to its absmax the rounding error of
    N(0, 1) weights is about 9.5% of their RMS (measured: 0.0954 on 256×1024). Values on the grid
    come back exactly (W rounds once, at the global scale)."""
    torch.manual_seed(0)
    w = torch.randn(256, 1024)
    packed, block, global_scale = nvfp4.quantize(w)
    assert (packed.dtype, block.dtype, global_scale.shape) == (torch.uint8, torch.float8_e4m3fn, (256, 1))
    rel = float((nvfp4.dequantize(packed, block, global_scale) - w).norm() / w.norm())
    print(f"\nNVFP4 relative RMS error of N(0,1) weights: {rel:.4f}")
    assert 0.07 < rel < 0.11
    exact = nvfp4.dequantize(packed, block, global_scale)
    assert torch.equal(nvfp4.dequantize(*nvfp4.quantize(exact, global_scale)), exact)
    zero = nvfp4.quantize(torch.zeros(2, 32))
    assert zero[0].eq(0).all() and zero[2].eq(1).all()  # an all-zero row: scale 1, codes 0


@pytest.fixture
def layer():
    torch.manual_seed(1)
    w = torch.randn(160, 256) * 0.05
    packed, block, global_scale = nvfp4.quantize(w)
    return {"weight": packed, "weight_scale": block, "weight_scale_2": global_scale, "bias": torch.randn(160)}, w


def test_the_fp4_gemm_layer_is_w4a4_of_the_stored_weight(layer, monkeypatch):
    params, w = layer
    monkeypatch.setattr(torch, "_scaled_mm", scaled_mm_fp4)
    x = torch.randn(2, 75, 256)  # 150 tokens: not whole 128-row tiles of activation scales
    got = fp4_gemm.fp4_dense(x, params)
    # the same arithmetic written out: each token quantized like a weight row, both widened
    xq = nvfp4.dequantize(*nvfp4.quantize(x.reshape(-1, 256))).to(torch.float64)
    wq = nvfp4.dequantize(params["weight"], params["weight_scale"], params["weight_scale_2"]).to(torch.float64)
    want = (xq @ wq.t() + params["bias"].to(torch.float64)).reshape(2, 75, 160)
    assert got.shape == (2, 75, 160) and got.dtype == torch.float32
    torch.testing.assert_close(got.to(torch.float64), want, rtol=1e-5, atol=1e-5)
    exact = x @ w.t() + params["bias"]
    rel = float((got - exact).norm() / (exact - params["bias"]).norm())
    print(f"\nW4A4 layer vs float32: relative RMS error {rel:.3f}")
    assert rel < 0.2  # both operands carry e2m1's ~9.5% error: about √2 of it


def test_nvfp4_layers_widen_where_fp4_gemms_do_not_run(layer):
    params, _ = layer
    x = torch.randn(3, 256)
    assert not fp4_gemm.fp4_supported(torch.device("cpu"))
    assert torch.equal(fp8_gemm.fp8_dense(x, params), torch_ops.dense(x, params))
    wq = nvfp4.dequantize(params["weight"], params["weight_scale"], params["weight_scale_2"])
    torch.testing.assert_close(torch_ops.dense(x, params), x @ wq.t() + params["bias"])
