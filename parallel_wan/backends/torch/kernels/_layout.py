"""What the kernel files share (imported when a kernel first runs, with torch): the model's
(B, L, H, D) layout against SDPA's (B, H, L, D), and every kernel's log-sum-exp as (B, S, H)."""

from __future__ import annotations

import torch

from ..attention import lse_dtype


def bhld(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2)


def lse_bsh(lse: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """A kernel's lse for queries `q` (B, S, H, D) as (B, S, H) in `lse_dtype(q.dtype)`. Kernels
    disagree on its shape: (B, H, S), (B, H, S, 1) for cuDNN, and the efficient kernel has padded
    S to a multiple of 32 in some releases."""
    b, s, h, _ = q.shape
    return lse.reshape(b, h, -1)[:, :, :s].transpose(1, 2).to(lse_dtype(q.dtype))
