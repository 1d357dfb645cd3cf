"""`quantize=fp8|int8|nvfp4` at load: a block linear's copy out of the checkpoint that quantizes.

The loader describes each tensor's copy as a source (a view of the mapped file, or the
float32 sum with a merged LoRA: the LoRA is merged BEFORE quantizing, into the wide weight).
A quantized target's copy widens that source to float32 once, refuses NaN/inf as every copy
does (weights/finite.py), and writes q and its per-channel scale (`quantize_rows`; nvfp4: the
packed values, block scales and per-row global scale) into their destinations. Rows are
quantized independently, so a sharded load (this rank's rows only) writes exactly the rows of
the whole load — memory=sharded holds the same bytes as resident.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..finite import non_finite, refuse
from .form import quantize_layer


def quantizing_copy(
    q: torch.Tensor,
    scale: torch.Tensor,
    source: Callable[[], torch.Tensor],
    kind: str,
    origin: tuple[str, str],
    scale_2: torch.Tensor | None = None,
) -> Callable[[], None]:
    """A task for `copy_pool.run_all`: q, scale (and nvfp4's global scale_2) ←
    quantize_layer(source(), kind)."""

    def run() -> None:
        wide = source().to(torch.float32)
        bad = non_finite(wide)
        if bad:
            raise refuse(*origin, bad, wide.numel())
        for target, values in zip((q, scale, scale_2), quantize_layer(wide, kind), strict=False):
            target.copy_(values)

    return run
