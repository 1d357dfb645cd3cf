"""Radial Attention's block mask (Li et al. 2025, "Radial Attention: O(n log n) Sparse Attention
with Energy Decay for Long Video Generation"; code: mit-han-lab/radial-attention,
radial_attn/attn_mask `gen_log_mask_shrinked`, read at commit 72788d4): which key blocks each
query block of a video's self-attention visits. Numpy only: a mask is part of the plan.

Their rule, frame pair by frame pair (query frame i, key frame j, t tokens per frame, Wan):
- j = 0 is an attention sink: every frame sees all of frame 0;
- |i − j| ≤ 1: the whole frame pair;
- farther: a band |c − r| ≤ w of the frame pair's t × t tokens, w = 2^bitlen(t) / 2^bitlen(|i−j|)
  · decay_factor, at least one block wide — the band halves each time the distance doubles;
- and a frame pair is dropped altogether when its undecayed width 2^bitlen(t) / 2^bitlen(|i−j|)
  is under 128 (their constant, whatever the block) unless |i − j| is a multiple of 128 / width.
Each frame pair's token mask is cut to blocks at the frame's offset in the sequence (the rows
and columns of a frame's last partial block past ceil(t / block) blocks are dropped, as theirs
are) and a block is kept when over 60 % of its columns that have any kept token have more than
a third of the block's rows kept; the frame pairs' blocks are OR-ed. Tokens past the video's
(S2V's reference and motion tokens; their text tokens) are dense.

This computes the same blocks from interval arithmetic (no t × t token masks: 21² frame pairs
of 3600² tokens at A14B 720p would be 5.7·10⁹ booleans), and extends it to a sequence that is
not a whole number of blocks: the partial last block is dense, as their tokens past
video_tokens // block are; and where their mask leaves a query block no key block (frames under
a third of a block) its diagonal block is added. tests/unit/test_radial_mask.py holds it to masks their function
printed. Their comparisons are made in integers here (3·count > block for a density over a
third, 5·high > 3·nonzero for over 60 %), which give the same answers as their float32 ones.
"""

from __future__ import annotations

import math

import numpy as np

SPLIT_THRESHOLD = 128  # their get_diagonal_split_mask's constant (not the block size)


def window(distance: int, frame_tokens: int, decay_factor: float, block: int) -> int:
    """The half-width of the band frame pairs `distance` apart keep, in tokens (their
    get_window_width for Wan, floored: |c − r| is an integer)."""
    if distance <= 1:
        return frame_tokens
    width = 2 ** frame_tokens.bit_length() / 2 ** distance.bit_length() * decay_factor
    return math.floor(max(width, block))


def frame_pair_kept(distance: int, frame_tokens: int) -> bool:
    """Their get_diagonal_split_mask: a far frame pair whose band would be under 128 tokens wide
    is kept only at every (128 / width)-th distance."""
    width = 2 ** frame_tokens.bit_length() / 2 ** distance.bit_length()
    return width >= SPLIT_THRESHOLD or distance % int(SPLIT_THRESHOLD / width) == 0


def _pair_blocks(first_row: int, first_col: int, frame_tokens: int, band: int, block: int) -> np.ndarray:
    """The (k, k) blocks of one frame pair's band |c − r| ≤ band, the frame's tokens starting
    `first_row` / `first_col` tokens into their first block (k = ceil(t / block): rows and
    columns past k blocks are dropped, as their shrink drops them)."""
    k = -(-frame_tokens // block)
    cols = np.arange(k * block)  # in the frame pair's padded coordinates
    c = cols - first_col
    starts = np.arange(k)[:, None] * block
    lo = np.maximum(np.maximum(starts, first_row), first_row + c - band)
    hi = np.minimum(np.minimum(starts + block, first_row + frame_tokens), first_row + c + band + 1)
    count = np.where((c >= 0) & (c < frame_tokens), np.maximum(hi - lo, 0), 0)  # (k, k·block)
    count = count.reshape(k, k, block)
    nonzero = (count > 0).sum(-1)
    dense = (3 * count > block).sum(-1)  # columns with over a third of the block's rows
    return 5 * dense > 3 * nonzero  # over 60 % of the columns that have any


def radial_mask(tokens: int, grid: tuple[int, int, int], block: int, decay_factor: float) -> np.ndarray:
    """(nb, nb) bool, nb = ceil(tokens / block): query block → the key blocks it visits, for a
    sequence of `tokens` whose first F·H·W are the video's (grid (F, H, W), frame-major)."""
    frames, height, width = grid
    frame_tokens = height * width
    video = frames * frame_tokens
    if not 0 < video <= tokens:
        raise ValueError(f"the video's {video} tokens (grid {grid}) must be 1 … tokens={tokens}")
    nb = -(-tokens // block)
    mask = np.zeros((nb, nb), dtype=bool)
    border = video // block  # from here on dense: tokens past the video, the video's partial last block
    mask[border:] = True
    mask[:, border:] = True
    for i in range(frames):
        for j in range(frames):
            distance = abs(i - j)
            if j == 0:  # the attention sink
                band = frame_tokens
            elif frame_pair_kept(distance, frame_tokens):
                band = window(distance, frame_tokens, decay_factor, block)
            else:
                continue
            pair = _pair_blocks((i * frame_tokens) % block, (j * frame_tokens) % block, frame_tokens, band, block)
            r0, c0 = (i * frame_tokens) // block, (j * frame_tokens) // block
            rows, cols = min(pair.shape[0], nb - r0), min(pair.shape[1], nb - c0)
            mask[r0 : r0 + rows, c0 : c0 + cols] |= pair[:rows, :cols]
    # Every query block must see a key. Their rule keeps the diagonal wherever a frame is at
    # least a third of a block (the frame's own pair is whole); below that (t < block / 3: tiny
    # frames) it can leave a query block with no key at all, where their kernel's output is
    # undefined. Those diagonal blocks are added: the one place this departs from theirs.
    np.fill_diagonal(mask, True)
    return mask
