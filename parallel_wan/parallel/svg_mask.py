"""Sparse-VideoGen's masks (Xi et al. 2025, "Sparse VideoGen: Accelerating Video Diffusion
Transformers with Spatial-Temporal Sparsity"; code: svg-project/Sparse-VideoGen, the utils and
inference modules of its svg/models/wan, read at commit 5ce7b01): one band mask and two token orders. Numpy
only: a mask is part of the plan.

A spatial head attends within and near its own frame; a temporal head attends to the same
place in every frame. SVG serves both with ONE mask by reordering a temporal head's tokens:
    frame-major (the sequence as it is):   position f·S + s  (frame f, place s of S per frame)
    token-major (a temporal head's order): position s·F + f
and in either order a query sees the keys within a band |r − c| ≤ W of it plus the first S
positions (their sink: frame 0 in frame-major order — and, as their mask_mod applies the same
rule after the reorder, the first S/F places of every frame in token-major order). In
token-major order a band of W positions holds every frame of the W/F places nearest the
query's (in raster order): temporal.

The band's width comes from the density asked for, as their `sparsity_to_width` does (no
text tokens in Wan's self-attention): a band of half-width w covers 1 − (1 − w/N)² of the N×N
pairs, so w = N·(1 − √(1 − density)), rounded up to a multiple of 128 tokens as their
`generate_temporal_head_mask_mod` rounds it. (Their variable is named `sparsity` but is the
fraction kept.)

Block granularity: our kernel computes whole blocks, so a block pair is visited when ANY of
its token pairs is in their token mask — the smallest block mask holding theirs
(tests/unit/test_svg_mask.py holds it to their mask_mod, token by token). Their flex-attention
kernel trims a partial block to the band element-wise; ours computes the partial blocks whole,
at most one block more on each side of the band.
"""

from __future__ import annotations

import math

import numpy as np

BAND_ROUNDING = 128  # their round_to_multiple: the band's half-width in whole 128-token steps
# the profile (backends/torch/svg_attention.py): queries per call (their Wan scripts'
# num_sampled_rows), and the bytes its score matrices take at once (heads chunked to fit;
# memory_plan/bound.py counts them)
SAMPLES = 64
PROFILE_BYTES = 256 << 20


def band_width(tokens: int, density: float) -> int:
    """The band's half-width W in tokens for a `density` of the tokens × tokens pairs."""
    if not 0 < density <= 1:
        raise ValueError(f"density={density} must be in (0, 1]")
    width = tokens * (1 - math.sqrt(1 - density))
    return math.ceil(width / BAND_ROUNDING) * BAND_ROUNDING


def svg_mask(tokens: int, frame_tokens: int, block: int, density: float) -> np.ndarray:
    """(nb, nb) bool, nb = ceil(tokens / block): block pair (i, j) is visited when a query of
    block i and a key of block j are within the band (|r − c| ≤ W) or the key is one of the
    first `frame_tokens` positions (the sink)."""
    if not 0 < frame_tokens <= tokens:
        raise ValueError(f"frame_tokens={frame_tokens} must be 1 … tokens={tokens}")
    nb = -(-tokens // block)
    width = band_width(tokens, density)
    # the closest tokens of blocks i < j are i·b + b − 1 and j·b: (j − i − 1)·b + 1 apart
    reach = (width - 1) // block + 1 if width > 0 else 0
    i = np.arange(nb)
    mask = np.abs(i[:, None] - i[None, :]) <= reach
    mask[:, : -(-frame_tokens // block)] = True  # the sink: every key block holding one of the first S
    return mask


def token_major_order(frames: int, frame_tokens: int, length: int) -> np.ndarray:
    """order (length,) int64: a temporal head's position m holds the sequence's token order[m]
    — token-major over the F·S video tokens (m = s·F + f ← f·S + s), then positions past them
    (padding) where they are."""
    video = frames * frame_tokens
    if not 0 < video <= length:
        raise ValueError(f"the video's {video} tokens must be 1 … length={length}")
    order = np.arange(length, dtype=np.int64)
    order[:video] = np.arange(video, dtype=np.int64).reshape(frames, frame_tokens).T.reshape(-1)
    return order
