"""quant_compute=fp8 (backends/torch/fp8_gemm.py): the W8A8 linear against an fp32 emulation of
the same arithmetic, its fallbacks, and what `auto` picks on which device — on the CPU, where
torch._scaled_mm has a kernel, and on fake sm_90/sm_100 GPUs, where torch's own meta kernel for
_scaled_mm checks the layouts and dtypes the cuBLASLt FP8 kernel requires."""

import pytest
import torch
from harness.fakegpu.cuda_runtime import FakeCudaRuntime
from harness.fakegpu.fake_mode import fake_gpus

from parallel_wan.backends.torch import fp8_gemm, ops as torch_ops
from parallel_wan.config import ConfigError
from parallel_wan.weights.quantized.form import dequantize, quantize_rows

U = 2.0**-24  # float32's unit roundoff


def _emulated(x, w_q, w_scale, bias):
    """W8A8 written out in float32: each token row scaled by its absmax / 448 and cast to
    float8_e4m3fn (round to nearest), the exact fp8 values multiplied in float32, then both
    scales applied. Returns (result, Σ|a·b| per output, the two scales' product) for the bound."""
    x2 = x.reshape(-1, x.shape[-1]).to(torch.float32)
    absmax = x2.abs().amax(dim=1, keepdim=True)
    sa = torch.where(absmax > 0, absmax / 448.0, torch.ones_like(absmax))
    a = (x2 / sa).clamp(-448, 448).to(torch.float8_e4m3fn).to(torch.float32)
    b = w_q.to(torch.float32)
    scales = sa * w_scale.reshape(1, -1)
    out = (a @ b.T) * scales
    if bias is not None:
        out = out + bias.to(torch.float32)
    return out, a.abs() @ b.abs().T, scales


@pytest.mark.parametrize("zero_row", [False, True])
def test_fp8_dense_is_w8a8_within_fp32_summation_error(zero_row):
    g = torch.Generator().manual_seed(0)
    k, n = 96, 40
    x = torch.randn(2, 7, k, generator=g) * torch.logspace(-2, 2, 7).reshape(1, 7, 1)  # tokens of very different size
    if zero_row:
        x[0, 3] = 0  # a zero token: scale 1, output = bias, no 0/0
    w_q, w_scale = quantize_rows(torch.randn(n, k, generator=g), "fp8")
    bias = torch.randn(n, generator=g)
    got = fp8_gemm.fp8_dense(x, {"weight": w_q, "weight_scale": w_scale, "bias": bias})
    want, magnitude, scales = _emulated(x, w_q, w_scale, bias)
    # The products of two e4m3 values (4 significant bits each) are exact in float32, so the two
    # sides differ only in how the K products are summed and when the scales multiply: each
    # summation order is within (K-1)·u·Σ|a·b| of the exact sum, the two scale products and the
    # bias add one rounding each → |got − want| ≤ 2·(K+2)·u·Σ|a·b|·sa·sb + u·|want|.
    bound = 2 * (k + 2) * U * magnitude * scales + U * want.abs()
    err = (got.reshape(-1, n) - want).abs()
    assert (err <= bound).all(), (err / bound).max()
    xq, sa = fp8_gemm.activation_scales(x.reshape(-1, k))
    assert sa.dtype == torch.float32 and sa.shape == (14, 1)
    assert torch.equal(
        xq.to(torch.float32), (x.reshape(-1, k) / sa).clamp(-448, 448).to(torch.float8_e4m3fn).to(torch.float32)
    )
    assert torch.equal(
        sa,
        torch.where(
            x.reshape(-1, k).abs().amax(1, keepdim=True) > 0,
            x.reshape(-1, k).abs().amax(1, keepdim=True) / 448,
            torch.tensor(1.0),
        ),
    )


def test_fp8_dense_in_bfloat16_rounds_once_more():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 64, generator=g).to(torch.bfloat16)
    w_q, w_scale = quantize_rows(torch.randn(32, 64, generator=g), "fp8")
    got = fp8_gemm.fp8_dense(x, {"weight": w_q, "weight_scale": w_scale})
    want, magnitude, scales = _emulated(x, w_q, w_scale, None)
    assert got.dtype == torch.bfloat16
    # the fp32 bound above, plus the final rounding to bfloat16 (8 significant bits: unit roundoff 2⁻⁸)
    bound = 2 * 66 * U * magnitude * scales + 2.0**-8 * want.abs()
    assert ((got.to(torch.float32) - want).abs() <= bound).all()


@pytest.mark.parametrize("kind, groups", [("int8", 1), ("fp8", 4)])
def test_int8_and_per_block_weights_widen_as_under_dequant(kind, groups):
    g = torch.Generator().manual_seed(2)
    w_q, _ = quantize_rows(torch.randn(12, 32, generator=g), kind)
    scale = torch.rand(12, groups, generator=g) + 0.5
    layer = {"weight": w_q, "weight_scale": scale, "bias": torch.randn(12, generator=g)}
    x = torch.randn(3, 32, generator=g)
    assert torch.equal(fp8_gemm.fp8_dense(x, layer), torch_ops.dense(x, layer))
    plain = {"weight": dequantize(w_q, scale), "bias": layer["bias"]}
    assert torch.equal(fp8_gemm.fp8_dense(x, plain), torch_ops.dense(x, plain))


def test_auto_picks_fp8_on_sm89_and_newer_only():
    assert fp8_gemm.choose("auto", torch.device("cpu")) == "dequant"
    assert fp8_gemm.choose("fp8", torch.device("cpu")) == "fp8"  # the CPU kernel: what these tests run
    assert fp8_gemm.choose("dequant", torch.device("cpu")) == "dequant"
    for capability, picked in (((9, 0), "fp8"), ((10, 0), "fp8"), ((8, 9), "fp8"), ((8, 0), "dequant")):
        with fake_gpus(FakeCudaRuntime(devices=1, capability=capability)):
            assert fp8_gemm.choose("auto", torch.device("cuda", 0), compiled=True) == picked, capability
            # eager W8A8 measured slower than bf16 on an H200: auto widens instead
            assert fp8_gemm.choose("auto", torch.device("cuda", 0)) == "dequant", capability
            if picked == "dequant":
                with pytest.raises(ConfigError, match=r"quant_compute=fp8 needs .* sm_80; set quant_compute=dequant"):
                    fp8_gemm.choose("fp8", torch.device("cuda", 0))
    assert fp8_gemm.ops_for("dequant") is torch_ops
    fp8_ops = fp8_gemm.ops_for("fp8")
    assert fp8_ops.dense is fp8_gemm.fp8_dense and fp8_ops.linear is torch_ops.linear


@pytest.mark.parametrize("capability", [(9, 0), (10, 0)])
def test_fake_gpu_fp8_gemm_layouts_and_no_host_sync(capability, monkeypatch):
    """On a fake H100/B200 the layer issues one _scaled_mm with A row-major (M, K), B the weight's
    column-major view (K, N), float32 scales (M, 1) and (1, N), all on the GPU; torch's meta
    kernel (what FakeTensorMode runs) refuses any other layout, as the CUDA kernel does — shown
    by the row-major B it refuses. Nothing is read back to the host."""
    real = torch._scaled_mm
    calls = []

    def spy(a, b, scale_a, scale_b, **kw):
        calls.append(
            (
                a.stride(),
                tuple(a.shape),
                b.stride(),
                tuple(b.shape),
                scale_a.dtype,
                tuple(scale_a.shape),
                scale_b.dtype,
                tuple(scale_b.shape),
                a.dtype,
                b.dtype,
                a.device.type,
                kw["out_dtype"],
            )
        )
        return real(a, b, scale_a, scale_b, **kw)

    monkeypatch.setattr(torch, "_scaled_mm", spy)
    with fake_gpus(FakeCudaRuntime(devices=1, capability=capability)) as mode:
        cuda = torch.device("cuda", 0)
        assert fp8_gemm.choose("auto", cuda, compiled=True) == "fp8"
        layer = {
            "weight": torch.empty(64, 48, dtype=torch.float8_e4m3fn, device=cuda),
            "weight_scale": torch.empty(64, 1, device=cuda),
            "bias": torch.empty(64, dtype=torch.bfloat16, device=cuda),
        }
        x = torch.empty(2, 10, 48, dtype=torch.bfloat16, device=cuda)
        out = fp8_gemm.ops_for("fp8").dense(x, layer)
        assert out.shape == (2, 10, 64) and out.dtype == torch.bfloat16 and out.device == cuda
        assert mode.recorder.host_reads == []
        with pytest.raises(RuntimeError, match="mat2 must be col_major"):
            real(
                torch.empty(20, 48, dtype=torch.float8_e4m3fn, device=cuda),
                layer["weight"].t().contiguous(),
                torch.empty(20, 1, device=cuda),
                torch.empty(1, 64, device=cuda),
                out_dtype=torch.bfloat16,
            )
    f8 = torch.float8_e4m3fn
    assert calls[0] == (
        (48, 1),
        (20, 48),
        (1, 48),
        (48, 64),
        torch.float32,
        (20, 1),
        torch.float32,
        (1, 64),
        f8,
        f8,
        "cuda",
        torch.bfloat16,
    )
    assert len(calls) == 1  # one GEMM for the layer
