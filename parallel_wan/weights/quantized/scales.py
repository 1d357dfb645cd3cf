"""The two small facts every quantizer shares, in one place: e4m3's largest value and a group's
absmax step (its largest magnitude over the largest the stored dtype holds). form.py's per-row
weight scales, the FP8 activations (backends/torch/fp8_gemm.py), FP8 attention's blocks
(backends/torch/fp8_attention.py) and NVFP4's block and global scales (nvfp4.py) take them
from here (tests/unit/test_small_facts_one_home.py)."""

from __future__ import annotations

import torch

FP8_MAX = 448.0  # the largest finite float8_e4m3fn


def absmax_steps(x: torch.Tensor, dims, limit: float = FP8_MAX) -> torch.Tensor:
    """x's absmax over `dims` / limit in float32 (0 where all are 0). The absmax is taken in x's
    dtype and then widened, exactly (a max rounds nothing)."""
    return x.abs().amax(dim=dims).to(torch.float32) / limit


def row_scales(x: torch.Tensor, limit: float) -> torch.Tensor:
    """One float32 scale per row of x (…, rows, cols): the row's absmax / limit, an all-zero row 1."""
    step = absmax_steps(x, -1, limit).unsqueeze(-1)
    return torch.where(step > 0, step, torch.ones_like(step))
