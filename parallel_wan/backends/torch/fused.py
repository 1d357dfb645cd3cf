"""Where the torch backend's `norm_modulate`, `gated_residual` and `rms_norm_rope` ops
(backends/torch/ops.py) run fused: on a CUDA device in eager mode, one Triton kernel each
(fused_kernels.py: a token's row read once and written once instead of 3–6 float32 round
trips); elsewhere — CPU, the planner's meta device, or inside torch.compile, which fuses the same
ops itself — the unfused ops (models/elementwise.py), bit for bit what the model ran before. The
fused kernels equal the unfused ops within an ulp or two of the output's dtype
(tests/parallel/test_fused_elementwise.py, in Triton's interpreter)."""

from __future__ import annotations

import torch

# The device types the fused kernels run on; the tests add "cpu" in a process whose Triton runs
# interpreted (TRITON_INTERPRET=1).
FUSED_DEVICES = {"cuda"}


def runs(x: torch.Tensor) -> bool:
    """Whether the fused kernel runs on hidden states `x` (B, L, dim)."""
    return x.device.type in FUSED_DEVICES and x.ndim == 3 and not torch.compiler.is_compiling()


def kernels():
    """The kernels' module (imports triton: only where they run)."""
    from . import fused_kernels

    return fused_kernels
