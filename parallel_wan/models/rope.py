"""3D rotary position tables for the Wan DiT, built on the host.

head_dim is split into time / height / width parts (`d - 4*(d//6)`, `2*(d//6)`, `2*(d//6)`),
each a 1D RoPE with theta 10000, angles in float64 (as both references compute them), then
cast to float32 (as diffusers hands them to attention). Tables are indexed by each token's
*global* position, so a rank holding a slice of the sequence rotates its tokens exactly as the
one-device run does.
"""

from __future__ import annotations

import numpy as np


def axis_dims(head_dim: int) -> tuple[int, int, int]:
    hw = 2 * (head_dim // 6)
    return head_dim - 2 * hw, hw, hw


def _angles(dim: int, positions: np.ndarray, theta: float) -> np.ndarray:
    inv_freq = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float64)[: dim // 2] / dim))
    return np.outer(positions.astype(np.float64), inv_freq)


MAX_POSITIONS = 1024  # per axis of the token grid: the RoPE table of the Wan 2.x DiT


def rope_tables(
    head_dim: int,
    grid: tuple[int, int, int],
    token_index: np.ndarray | None = None,
    theta: float = 10000.0,
    max_positions: int = MAX_POSITIONS,
) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin, each (tokens, head_dim // 2) float32, one row per token in `token_index`
    (flat indices into the frames × height × width token grid; all tokens when None). Indices
    past the grid (sequence padding) get the identity rotation."""
    f, h, w = grid
    if max(grid) > max_positions:
        raise ValueError(f"token grid {grid} exceeds the {max_positions} RoPE positions the model was trained with")
    n = f * h * w
    idx = np.arange(n) if token_index is None else np.asarray(token_index)
    valid = idx < n
    safe = np.where(valid, idx, 0)
    ft, hh, ww = safe // (h * w), (safe // w) % h, safe % w
    dt, dh, dw = axis_dims(head_dim)
    angles = np.concatenate([_angles(dt, ft, theta), _angles(dh, hh, theta), _angles(dw, ww, theta)], axis=1)
    angles[~valid] = 0.0
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def apply_rope(x, cos, sin, ops):
    """Rotate interleaved pairs (x[2i], x[2i+1]) of x (B, L, H, D) by the tables (L, D/2).
    The product is taken in float32 (the tables' dtype) and cast back, as diffusers does."""
    b, l, heads, d = x.shape
    pairs = ops.reshape(x, (b, l, heads, d // 2, 2))
    x1, x2 = pairs[..., 0], pairs[..., 1]
    cos = ops.reshape(cos, (1, l, 1, d // 2))
    sin = ops.reshape(sin, (1, l, 1, d // 2))
    even = x1 * cos - x2 * sin
    odd = x1 * sin + x2 * cos
    out = ops.reshape(ops.stack([even, odd], axis=-1), (b, l, heads, d))
    return ops.cast_like(out, x)


def rope_at(head_dim: int, positions: np.ndarray, theta: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin (N, head_dim // 2) float32 for tokens at explicit (frame, row, column)
    positions (N, 3) — any integers, negative frames included (S2V's motion tokens sit before
    frame 0; a negative angle is the conjugate rotation, as the official table's `.conj()`)."""
    positions = np.asarray(positions)
    if positions.size and np.abs(positions).max() >= MAX_POSITIONS:
        raise ValueError(f"a RoPE position of {int(np.abs(positions).max())} exceeds the {MAX_POSITIONS} positions")
    dt, dh, dw = axis_dims(head_dim)
    angles = np.concatenate(
        [_angles(dt, positions[:, 0], theta), _angles(dh, positions[:, 1], theta), _angles(dw, positions[:, 2], theta)],
        axis=1,
    )
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
