"""cache=magcache cache.calibrate=true: run dense and measure the curve MagCache reads.

At every step after the first, per CFG branch, the mean over tokens (and the branch's rows) of
‖r_t‖ / ‖r_{t−1}‖, r being the block stack's residual (output − input) and the norm over the
hidden dimension — the official calibration (MagCache4Wan2.2's `magcache_calibration`). The
previous residual crosses the expert switch, as in the official run, so the curve shows the
switch's dip. Under sequence parallelism each rank sums its valid tokens and the sums are added
over the group. Written in the official format: interleaved cond/uncond, 2·N − 2 numbers (an
unguided run measures one branch and writes it for both).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..report.outputs import write_json


def branch_ratio_sums(residual, previous, valid, branches: int, ops):
    """(branches,) float32: per branch, Σ over its rows and this shard's valid tokens of
    ‖r‖ / ‖r_prev‖."""
    r = ops.cast(residual, "float32")
    prev = ops.cast(previous, "float32")
    ratio = ops.sum(r * r, axis=-1, keepdims=True) ** 0.5 / ops.sum(prev * prev, axis=-1, keepdims=True) ** 0.5
    ratio = ops.where(valid > 0, ratio, ops.zeros_like(ratio))  # padded tokens: 0/0 must not count
    rows = r.shape[0] // branches
    return ops.stack([ops.sum(ratio[b * rows : (b + 1) * rows]) for b in range(branches)])


def official_curve(per_step: list[list[float]]) -> list[float]:
    """Steps 1…N−1's per-branch means → the interleaved cond/uncond list."""
    out = []
    for means in per_step:
        cond = means[0]
        # one branch measured (an unguided run, or a step whose expert had guidance 1.0): both
        uncond = means[1] if len(means) > 1 and means[1] == means[1] else cond
        out += [float(cond), float(uncond)]
    return out


def write_curve(directory: str | os.PathLike, curve: list[float]) -> Path:
    """mag_ratios.json beside the video (written under a temporary name, then renamed)."""
    path = Path(directory) / "mag_ratios.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, curve, indent=None)
    return path
