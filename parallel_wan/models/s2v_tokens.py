"""Where S2V-14B's tokens sit: the video's, then the reference image's, then the motion frames'
(the previous clip's last latent frames, packed coarser the further back they are), with the
RoPE position of each. Plain arithmetic on the token grid (numpy, no torch, no jax).

The positions are the official `rope_precompute`'s: a group of tokens spanning `span` frames
(rows, columns) of the grid with `count` tokens along that axis takes positions sampled evenly
over the span, rounded toward zero (`np.linspace(...).astype(int)`); a group before frame 0
(the motion frames) counts backwards from the start and takes the negated positions.
"""

from __future__ import annotations

import numpy as np

from .rope import rope_at
from .s2v_config import REFERENCE_FRAME_POSITION, ZIP_FRAME_BUCKETS


def _axis(start: int, span: int, count: int) -> np.ndarray:
    """`count` positions over `span` from `start` (the official sampling; backwards when start < 0)."""
    if start >= 0:
        return np.linspace(start, start + span - 1, count).astype(int)
    return -np.linspace(-start, -start - span + 1, count).astype(int)


def _group(start_frame: int, spans: tuple[int, int, int], counts: tuple[int, int, int]) -> np.ndarray:
    """(count_f · count_h · count_w, 3) positions of a group, frame-major as its tokens are laid out."""
    f = _axis(start_frame, spans[0], counts[0])
    h = _axis(0, spans[1], counts[1])
    w = _axis(0, spans[2], counts[2])
    grid = np.stack(np.meshgrid(f, h, w, indexing="ij"), axis=-1)
    return grid.reshape(-1, 3)


def video_positions(grid: tuple[int, int, int]) -> np.ndarray:
    return _group(0, grid, grid)


def reference_positions(height: int, width: int) -> np.ndarray:
    """The reference image's tokens: one frame at frame 30 (official), the video's rows and columns."""
    return _group(REFERENCE_FRAME_POSITION, (1, height, width), (1, height, width))


def motion_token_counts(height: int, width: int) -> tuple[int, ...]:
    """Tokens of the frame packer's groups for a token grid of height × width: the nearest latent
    frame at full token resolution, the next 2 frames as one at half, the 16 before as 4 at a
    quarter."""
    near, mid, far = ZIP_FRAME_BUCKETS
    return (near * height * width, (mid // 2) * (height // 2) * (width // 2), (far // 4) * (height // 4) * (width // 4))


def motion_positions(height: int, width: int) -> np.ndarray:
    """The motion tokens' positions, nearest group first (the order the frame packer emits)."""
    near, mid, far = ZIP_FRAME_BUCKETS
    groups = (
        _group(-near, (near, height, width), (near, height, width)),
        _group(-(near + mid), (mid, height, width), (mid // 2, height // 2, width // 2)),
        _group(-(near + mid + far), (far, height, width), (far // 4, height // 4, width // 4)),
    )
    return np.concatenate(groups)


def extra_positions(height: int, width: int, motion: bool) -> np.ndarray:
    """The tokens after the video's: the reference's, then (unless the clip drops them) the motion's."""
    parts = [reference_positions(height, width)] + ([motion_positions(height, width)] if motion else [])
    return np.concatenate(parts)


def extra_kinds(height: int, width: int, motion: bool) -> list[int]:
    """The trainable_cond_mask row of each token after the video's: 1 the reference's, 2 the motion's."""
    return [1] * (height * width) + ([2] * sum(motion_token_counts(height, width)) if motion else [])


def sequence_rope(head_dim: int, grid: tuple[int, int, int], motion: bool, token_index) -> tuple:
    """cos and sin (len(token_index), head_dim // 2) of a clip's sequence — the video's tokens,
    then the extra ones — at these global positions (a rank's or a shard's; padding past the
    sequence's end: the identity rotation)."""
    positions = np.concatenate([video_positions(grid), extra_positions(grid[1], grid[2], motion)])
    index = np.asarray(token_index)
    valid = index < len(positions)
    cos, sin = rope_at(head_dim, positions[np.where(valid, index, 0)])
    cos[~valid], sin[~valid] = 1.0, 0.0
    return cos, sin
