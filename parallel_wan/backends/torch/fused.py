"""The torch backend's `norm_modulate`, `gated_residual` and `rms_norm_rope` ops: on a CUDA
device in eager mode, one Triton kernel each (fused_kernels.py: a token's row read once and
written once instead of 3–6 float32 round trips); elsewhere — CPU, or inside torch.compile,
which fuses the same ops itself — the unfused ops (models/elementwise.py), bit for bit what the
model ran before. The fused kernels equal the unfused ops within one unit in the last place of
the output's dtype (tests/parallel/test_fused_elementwise.py, in Triton's interpreter)."""

from __future__ import annotations

import torch

from ...models import elementwise

# The device types the fused kernels run on; the tests add "cpu" in a process whose Triton runs
# interpreted (TRITON_INTERPRET=1).
FUSED_DEVICES = {"cuda"}


def _fused(x: torch.Tensor) -> bool:
    return x.device.type in FUSED_DEVICES and x.ndim == 3 and not torch.compiler.is_compiling()


def _ops():
    from . import ops

    return ops


def norm_modulate(x, scale, shift, eps: float = 1e-6):
    if _fused(x):
        from .fused_kernels import norm_modulate as fused

        return fused(x, scale, shift, eps)
    return elementwise.norm_modulate(x, scale, shift, eps, _ops())


def gated_residual(x, y, gate):
    if _fused(x) and y.shape == x.shape:
        from .fused_kernels import gated_residual as fused

        return fused(x, y, gate)
    return elementwise.gated_residual(x, y, gate, _ops())


def rms_norm_rope(x, weight, eps: float, heads: int, cos, sin):
    if _fused(x) and weight is not None and (x.shape[-1] // heads) % 2 == 0:
        from .fused_kernels import rms_norm_rope as fused

        return fused(x, weight, eps, heads, cos, sin)
    return elementwise.rms_norm_rope(x, weight, eps, heads, cos, sin, _ops())
