"""Quantized linear weights: the one in-memory form, and quantizing a wide weight into it.

Every quantized file format (Kijai/ComfyUI scaled fp8, ComfyUI mixed precision, LightX2V) and
`quantize=fp8|int8` at load end in the same form, so backends, memory modes and caches see one
thing: a block linear's params dict holds

    weight        int8 or float8_e4m3fn, (out, in)       — the stored values q
    weight_scale  float32, (out, G), G dividing `in`      — W[o, i] = q[o, i] · s[o, i // (in / G)]
    bias          as for any linear (the run's dtype)

G = 1 is one scale per output channel (LightX2V; `quantize=`; a per-tensor scalar is expanded to
its rows, exactly); G > 1 is a scale per block of in/G inputs (ComfyUI's int8 blockwise, whose
(out/128, in/128) table is repeated over each block's 128 rows). Every tensor is per output row,
so a dim-0 shard (FSDP, a sharded load) cuts weight and scale alike, and fused q‖k‖v
concatenates them. `backends/*/ops.dense` widens; the FP8 GEMM path uses G = 1 only.

Only the transformer blocks' linears are ever quantized (`quantizable`): norms, embeddings,
modulation tables and the head stay as the references keep them.
"""

from __future__ import annotations

import torch

from .quantizable import quantizable  # noqa: F401 (the name rule, torch-free; importers take it from here too)

KINDS = {"fp8": torch.float8_e4m3fn, "int8": torch.int8}
LIMIT = {torch.float8_e4m3fn: 448.0, torch.int8: 127.0}  # the largest magnitude each stores
SCALE_SUFFIX = "_scale"  # "<layer>.weight" → "<layer>.weight_scale"


def scale_name(weight_name: str) -> str:
    return weight_name + SCALE_SUFFIX


def quantize_rows(w: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale) for a wide weight (…, out, in): one float32 scale per output channel,
    absmax / LIMIT (an all-zero row gets scale 1), q = w / scale rounded to the nearest stored
    value (int8: round half to even, then clamped to ±127; fp8: the cast's round-to-nearest)."""
    dtype = KINDS[kind]
    w32 = w.to(torch.float32)
    absmax = w32.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(absmax > 0, absmax / LIMIT[dtype], torch.ones_like(absmax))
    scaled = (w32 / scale).clamp(-LIMIT[dtype], LIMIT[dtype])
    q = scaled.round().to(dtype) if dtype is torch.int8 else scaled.to(dtype)
    return q, scale


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """W = q · scale in float32 (the reference the backends' widening must equal)."""
    *lead, rows, cols = q.shape
    groups = scale.shape[-1]
    w = q.to(torch.float32).reshape(*lead, rows, groups, cols // groups) * scale.to(torch.float32).unsqueeze(-1)
    return w.reshape(q.shape)


def is_scale(name: str) -> bool:
    """The name of a quantized weight's scale (`…weight_scale`)."""
    return name.endswith(".weight" + SCALE_SUFFIX) or name == "weight" + SCALE_SUFFIX


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
