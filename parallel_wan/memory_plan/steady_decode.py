"""`models.vae.decode` on meta tensors for its peak, running only the chunks whose shapes are new.

Why: an A14B 81-frame plan decodes 21 latent frames; on meta tensors each chunk costs ~0.5 s of
Python dispatch, and the planner (`parallel-wan plan`, every preflight) ran them all. A chunk's
ops on meta tensors are a function of its input shapes only (the latent frame and the time
cache it is given), so once a chunk is given a cache of the same shapes as the chunk before it,
it does exactly what that chunk did: the same ops, the same bytes above what it started with,
an output of the same shape and a cache of the same shapes again. From there each remaining
chunk only adds its output frames to what is held, so its peak is the steady chunk's rise above
what is held at its start; that is counted, and a meta tensor of its output shape is kept, as
the run keeps its frames until the concatenation.

The loop is `models.vae.decode`'s (its frames list and concatenation included);
tests/unit/test_plan.py checks the result against that decode measured on CPU.
"""

from __future__ import annotations

import torch

from ..models import vae
from ..models.vae_causal import Array


def _cache_shapes(cache) -> dict | None:
    """Shapes, strides and the bytes of the storage behind each entry (an entry may be a view
    of a larger tensor, which it keeps alive)."""
    if cache is None:
        return None
    return {k: (tuple(v.shape), v.stride(), v.untyped_storage().nbytes()) for k, v in cache.items()}


def steady_decode(params, z, ops, cfg, live) -> Array:
    """`vae.decode(params, z, ops, cfg)` inside the `LiveBytes` mode `live`, whose `peak` ends
    as the full decode's would."""
    cache, frames = None, []
    previous_shapes, rise = object(), None  # rise: the last run chunk's peak above its start
    for i in range(z.shape[2]):
        shapes = _cache_shapes(cache)
        if rise is not None and shapes == previous_shapes:
            # The same input shapes as the chunk just run: the same ops, the same rise.
            live.peak = max(live.peak, live.now + rise)
            frames.append(torch.empty_like(frames[-1]))
            continue
        start, outer_peak = live.now, live.peak
        live.peak = start
        out, cache = vae.decode_chunk(params, z[:, :, i : i + 1], cache, ops, cfg)
        rise = live.peak - start
        live.peak = max(outer_peak, live.peak)
        frames.append(out)
        previous_shapes = shapes
    return ops.concat(frames, axis=2)
