"""Decoded video → uint8 frames, written against `ops` so each backend makes them on its device."""

from __future__ import annotations


def to_uint8_frames(video, ops):
    """(1, 3, T, H, W) in [-1, 1] → (T, H, W, 3) uint8, rounded half to even."""
    v = ops.round(ops.clip((video[0] + 1.0) * 127.5, 0.0, 255.0))
    return ops.cast(ops.transpose(v, (1, 2, 3, 0)), "uint8")
