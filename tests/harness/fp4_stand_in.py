"""FP4 `torch._scaled_mm` on the CPU, for tests: torch 2.13 runs FP4 GEMMs on CUDA sm_100+ only.

Written from the op's contract, not from parallel_wan: the real op's meta kernel checks the
operands (float4_e2m1fn_x2 dtypes, A row-major, B column-major, float8_e4m3fn block scales of
the swizzled sizes — what FakeTensorMode and a B200 enforce), then the product is computed in
float64 from the packed codes (low nibble first) and the scale tables unswizzled by the
harness's own loop (quantized_files.unswizzled)."""

import torch

from .quantized_files import E2M1, unswizzled

GRID = torch.cat([E2M1, -E2M1]).to(torch.float64)  # every e2m1 value, by code (0..15)
SCALED_MM = torch._scaled_mm  # the op itself (its meta kernel), before a test stands in for it


def scaled_mm_fp4(a, b, scale_a, scale_b, out_dtype, **unused):
    meta = [t.to("meta") for t in (a, b, scale_a, scale_b)]
    SCALED_MM(meta[0], meta[1], scale_a=meta[2], scale_b=meta[3], out_dtype=out_dtype)
    assert a.dtype == b.dtype == torch.float4_e2m1fn_x2 and scale_a.dtype == scale_b.dtype == torch.float8_e4m3fn
    return (_operand(a, scale_a) @ _operand(b.t(), scale_b).t()).to(out_dtype)


def _operand(packed, scales):
    """(rows, K/2) packed codes → (rows, K) float64 values times their block scales."""
    raw = packed.view(torch.uint8)
    code = torch.stack((raw & 0x0F, raw >> 4), dim=-1).reshape(raw.shape[0], -1).long()
    rows, k = code.shape
    padded = (-(-rows // 128) * 128, -(-(k // 16) // 4) * 4)
    s = unswizzled(scales.reshape(padded), rows, k // 16).to(torch.float64)
    return (GRID[code].reshape(rows, -1, 16) * s[..., None]).reshape(rows, k)
