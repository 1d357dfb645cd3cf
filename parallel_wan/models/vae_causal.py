"""Causal 3D convolution over a video cut into chunks, with the past carried as a value.

The Wan VAE never looks at future frames: every 3-tap temporal kernel is padded with two
frames in front. The reference encodes/decodes a video a chunk at a time (1 frame, then 4 at
a time for the encoder; 1 latent frame per call for the decoder) and lets each conv remember
the last 2 frames it saw, so memory is bounded by one chunk. The reference keeps that memory
in a mutable list on the module; here it is an explicit dict {conv path: frames}, read from
the previous chunk and written fresh for the next, so a JAX backend can carry it through a
`lax.scan`.

Every entry holds a fixed number of frames from the first chunk on (zeros stand in for the
frames before the video, which is exactly the causal zero padding), so the dict returned by
the first chunk has the same structure and shapes as every later one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Array = Any

# A 3-tap temporal kernel needs the 2 frames before the chunk.
CACHE_FRAMES = 2


class TimeCache:
    """The frames before the current chunk, per conv, for one encoder or decoder call.

    `previous` is the dict the last chunk returned, or None for the first chunk of a video.
    The new entries go into `next`, a fresh dict, so the caller's value is never changed.
    """

    def __init__(self, previous: Mapping[str, Array] | None):
        self.previous = dict(previous) if previous else {}
        self.first_chunk = not self.previous
        self.next: dict[str, Array] = {}

    def past(self, name: str, x: Array, frames: int, ops) -> Array:
        """The `frames` frames before `x` at conv `name` (zeros before the first chunk)."""
        if name in self.previous:
            return self.previous[name]
        if not self.first_chunk:
            raise KeyError(
                f"the VAE time cache has no entry {name!r}; pass the cache returned by the previous "
                "chunk of the same video and model, or None to start a new video"
            )
        b, c, _, h, w = x.shape
        return ops.zeros((b, c, frames, h, w), ops.dtype_name(x), like=x)

    def keep(self, name: str, frames: Array) -> None:
        self.next[name] = frames


def causal_conv3d(p, x, ops, cache: TimeCache, name: str) -> Array:
    """Conv3d with the temporal padding all in front, filled from `cache`.

    Spatial padding is symmetric (kernel // 2), as in the reference's `padding=1` convs; a
    kernel with one temporal tap (1×1×1 shortcuts and quant convs) needs no past.
    """
    w = p["weight"]
    kt, kh, kw = w.shape[2], w.shape[3], w.shape[4]
    if kt > 1:
        history = kt - 1
        x = ops.concat([cache.past(name, x, history, ops), x], axis=2)
        # a copy of the last frames, not a view: a view would keep the whole padded input alive
        cache.keep(name, ops.detach_copy(x[:, :, x.shape[2] - history :]))
    return ops.conv3d(x, w, p.get("bias"), padding=(0, kh // 2, kw // 2))
