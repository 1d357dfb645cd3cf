"""The one in-memory form's arithmetic (the form itself: this package's __init__.py): the stored
dtypes and the largest magnitude each holds, a per-row scale, quantizing a wide weight's rows,
widening them back, and the dtypes placement and the loader give the form's tensors."""

from __future__ import annotations

import torch

from . import nvfp4
from .names import global_scale_name, is_scale, quantizable, scale_name
from .scales import FP8_MAX, row_scales

KINDS = {"fp8": torch.float8_e4m3fn, "int8": torch.int8, "nvfp4": nvfp4.PACKED}
# the largest magnitude each stored dtype holds (uint8: NVFP4's packed e2m1 pairs, ±6 each)
LIMIT = {torch.float8_e4m3fn: FP8_MAX, torch.int8: 127.0, nvfp4.PACKED: nvfp4.E2M1_MAX}


def quantize_rows(w: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale) for a wide weight (…, out, in): one float32 scale per output channel,
    absmax / LIMIT (an all-zero row gets scale 1), q = w / scale rounded to the nearest stored
    value (int8: round half to even, then clamped to ±127; fp8: the cast's round-to-nearest)."""
    dtype = KINDS[kind]
    w32 = w.to(torch.float32)
    scale = row_scales(w32, LIMIT[dtype])
    scaled = (w32 / scale).clamp(-LIMIT[dtype], LIMIT[dtype])
    q = scaled.round().to(dtype) if dtype is torch.int8 else scaled.to(dtype)
    return q, scale


def quantize_layer(w: torch.Tensor, kind: str) -> tuple[torch.Tensor, ...]:
    """The form's tensors of a wide (out, in) weight under `kind`, in the order of
    `layer_names`: (q, scale) for fp8/int8 (`quantize_rows`), (packed, block scales, global
    scale) for nvfp4 (nvfp4.quantize, a global scale per row)."""
    return nvfp4.quantize(w) if kind == "nvfp4" else quantize_rows(w, kind)


def layer_names(name: str, kind: str) -> tuple[str, ...]:
    """The names `quantize_layer`'s tensors take for the weight `name`."""
    names = (name, scale_name(name))
    return names + (global_scale_name(name),) if kind == "nvfp4" else names


def dequantize(q: torch.Tensor, scale: torch.Tensor, scale_2: torch.Tensor | None = None) -> torch.Tensor:
    """W = q · scale in float32 (the reference the backends' widening must equal); an NVFP4
    weight (packed uint8, e4m3 block scales) also takes its global scale `scale_2`."""
    if nvfp4.is_nvfp4(q, scale):
        return nvfp4.dequantize(q, scale, scale_2)
    *lead, rows, cols = q.shape
    groups = scale.shape[-1]
    w = q.to(torch.float32).reshape(*lead, rows, groups, cols // groups) * scale.to(torch.float32).unsqueeze(-1)
    return w.reshape(q.shape)


def placed_dtype(name: str, stored: torch.dtype, target: torch.dtype, keep_fp32) -> torch.dtype:
    """The dtype a tensor keeps on the device: a quantized weight its stored bytes, its scale
    float32 — NVFP4's block scales float8_e4m3fn — (placement must never cast either to the
    run's dtype: that would undo the memory saving, or round the scales), the reference's
    float32 exceptions float32, other floating tensors the run's dtype, integers as stored."""
    if stored in LIMIT or is_scale(name):
        return stored if stored in LIMIT else torch.float32
    if not stored.is_floating_point:
        return stored
    return torch.float32 if keep_fp32 is not None and keep_fp32(name) else target


def quantized_targets(targets: dict, kind: str) -> dict:
    """The loader's targets (name → (shape, dtype)) under `quantize=kind`: each wide block
    linear's weight in the quantized dtype, followed by its float32 scale (rows, 1) — nvfp4: the
    packed weight (rows, in/2), its e4m3 block scales (rows, in/16) and float32 global scale
    (rows, 1); a weight an expert file stores quantized already (its scale a target) stays as is."""
    out = {}
    for name, (shape, dtype) in targets.items():
        if quantizable(name) and len(shape) == 2 and dtype not in LIMIT and scale_name(name) not in targets:
            if kind == "nvfp4":
                rows, cols = shape
                if cols % nvfp4.BLOCK:  # no whole blocks of 16 (no Wan 2.2 linear): left wide
                    out[name] = (shape, dtype)
                    continue
                out[name] = ((rows, cols // 2), nvfp4.PACKED)
                out[scale_name(name)] = ((rows, cols // nvfp4.BLOCK), nvfp4.SCALE)
                out[global_scale_name(name)] = ((rows, 1), torch.float32)
                continue
            out[name] = (shape, KINDS[kind])
            out[scale_name(name)] = ((shape[0], 1), torch.float32)
        else:
            out[name] = (shape, dtype)
    return out
