"""An NVFP4 layer multiplied in FP4 (W4A4) on Blackwell (CUDA sm_100+), through `torch._scaled_mm`.

Per call: each token's activations get a global scale (absmax / (6 · 448)) and, per block of 16
inputs, an e4m3 scale (the block's absmax / 6 / global); the values divided by both are rounded
to e2m1 and packed two a byte — the weights' recipe (weights/quantized/nvfp4.py), per token.
`torch._scaled_mm` takes both operands as float4_e2m1fn_x2 — A row-major (M, K/2), B the
(N, K/2) weight's `.t()` view (column-major) — and both block-scale tables in cuBLAS's swizzled
128x4 layout (float8_e4m3fn, padded to whole tiles), accumulates in float32 and returns x's
dtype; the two global scales (token's × weight row's) are applied to the result after. Nothing
reads a value back to the host. The nibble order inside a byte does not matter to the product:
activations and weights are packed alike, and a block of 16 is 8 whole bytes, so a swapped
order permutes the same pairs of both operands.

The weight's scales are kept in row order (sliceable, fusable) and swizzled here per call: a
table of in/16 bytes a row, 1/8 of the weight's bytes, moved once (fused under compile=true).

Where FP4 tensor cores are missing (CPU, Hopper and older) an NVFP4 layer is widened as under
quant_compute=dequant: torch 2.13 has FP4 `_scaled_mm` kernels for CUDA sm_100+ only.
"""

from __future__ import annotations

import torch

from ...weights.quantized import nvfp4
from . import ops as torch_ops

FP4 = torch.float4_e2m1fn_x2
FP4_CAPABILITY = (10, 0)  # Blackwell (B200, GB200): FP4 tensor cores


def fp4_supported(device: torch.device) -> bool:
    """FP4 GEMMs run here: a CUDA device of compute capability 10.0 or newer."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= FP4_CAPABILITY


def quantize_activations(x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(packed e2m1 (M, K/2) as float4_e2m1fn_x2, swizzled e4m3 block scales, float32 global
    scales (M, 1)) of a 2-D x, per token."""
    packed, block, global_scale = nvfp4.quantize(x2)
    return packed.view(FP4), nvfp4.to_blocked(block), global_scale


def fp4_dense(x: torch.Tensor, layer: dict) -> torch.Tensor:
    """`ops.dense` for an NVFP4 layer on a device with FP4 tensor cores: W4A4 via _scaled_mm."""
    w, scale, scale_2 = layer["weight"], layer["weight_scale"], layer["weight_scale_2"]
    lead, k = x.shape[:-1], x.shape[-1]
    xq, x_block, x_global = quantize_activations(x.reshape(-1, k))
    out = torch._scaled_mm(xq, w.view(FP4).t(), scale_a=x_block, scale_b=nvfp4.to_blocked(scale), out_dtype=x.dtype)
    out = (out.to(torch.float32) * x_global * scale_2.reshape(1, -1)).to(x.dtype)
    bias = layer.get("bias")
    if bias is not None:
        out = out + bias
    return out.reshape(*lead, w.shape[0])


def nvfp4_dense(x: torch.Tensor, layer: dict) -> torch.Tensor:
    """An NVFP4 layer under the GEMM paths (fp8_gemm.fp8_dense): FP4 where the device has FP4
    tensor cores, widened elsewhere."""
    rows, packed = layer["weight"].shape
    # cuBLASLt's FP4 kernel takes K a multiple of 32 and N of 16 (every Wan 2.2 linear's): others widen
    if fp4_supported(layer["weight"].device) and packed % 16 == 0 and rows % 16 == 0:
        return fp4_dense(x, layer)
    return torch_ops.dense(x, layer)
