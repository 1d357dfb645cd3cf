"""The one in-memory form's arithmetic (the form itself: this package's __init__.py): the stored
dtypes and the largest magnitude each holds, a per-row scale, quantizing a wide weight's rows,
widening them back, and the dtypes placement and the loader give the form's tensors."""

from __future__ import annotations

import torch

from .names import is_scale, quantizable, scale_name

KINDS = {"fp8": torch.float8_e4m3fn, "int8": torch.int8}
FP8_MAX = 448.0  # the largest finite float8_e4m3fn
LIMIT = {torch.float8_e4m3fn: FP8_MAX, torch.int8: 127.0}  # the largest magnitude each stores


def row_scales(x: torch.Tensor, limit: float) -> torch.Tensor:
    """One float32 scale per row of x (…, rows, cols): the row's absmax / limit, an all-zero row
    1. The absmax is taken in x's dtype and then widened, exactly (a max rounds nothing)."""
    absmax = x.abs().amax(dim=-1, keepdim=True).to(torch.float32)
    return torch.where(absmax > 0, absmax / limit, torch.ones_like(absmax))


def absmax_steps(x: torch.Tensor, dims, limit: float = FP8_MAX) -> torch.Tensor:
    """x's absmax over `dims` / limit in float32 (0 where all are 0): the quantization step of
    each group (FP8 attention's blocks of tokens and channels of values), exactly as `row_scales`
    takes it."""
    return x.abs().amax(dim=dims).to(torch.float32) / limit


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


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """W = q · scale in float32 (the reference the backends' widening must equal)."""
    *lead, rows, cols = q.shape
    groups = scale.shape[-1]
    w = q.to(torch.float32).reshape(*lead, rows, groups, cols // groups) * scale.to(torch.float32).unsqueeze(-1)
    return w.reshape(q.shape)


def placed_dtype(name: str, stored: torch.dtype, target: torch.dtype, keep_fp32) -> torch.dtype:
    """The dtype a tensor keeps on the device: a quantized weight its stored bytes, its scale
    float32 (placement must never cast either to the run's dtype: that would undo the memory
    saving, or round the scales), the reference's float32 exceptions float32, other floating
    tensors the run's dtype, integers as stored."""
    if stored in LIMIT or is_scale(name):
        return stored if stored in LIMIT else torch.float32
    if not stored.is_floating_point:
        return stored
    return torch.float32 if keep_fp32 is not None and keep_fp32(name) else target


def quantized_targets(targets: dict, kind: str) -> dict:
    """The loader's targets (name → (shape, dtype)) under `quantize=kind`: each wide block
    linear's weight in the quantized dtype, followed by its float32 scale (rows, 1); a weight an
    expert file stores quantized already (its dtype int8/float8, its scale a target) stays as is."""
    out = {}
    for name, (shape, dtype) in targets.items():
        if quantizable(name) and len(shape) == 2 and dtype not in LIMIT and scale_name(name) not in targets:
            out[name] = (shape, KINDS[kind])
            out[scale_name(name)] = ((shape[0], 1), torch.float32)
        else:
            out[name] = (shape, dtype)
    return out
