"""The `ops` namespace for programs that XLA's SPMD partitioner splits by itself (a jit over
sharded or replicated arrays, no `shard_map`): the VAE decode split by height, the image encode.

Pallas/Mosaic kernels — splash attention, which `ops.attention` picks on TPU — cannot be
partitioned automatically: XLA:TPU refuses them outside `shard_map` ("Mosaic kernels cannot be
automatically partitioned"; found by compiling the decode ahead of time for a v5p slice,
tests/gpu/test_tpu_aot.py). Here attention is the plain jnp kernel instead, which the partitioner
splits like any einsum (the VAE's one-head attention over a frame's pixels: each device its
rows of queries against the gathered keys). Every other op is `ops`' own.
"""

from __future__ import annotations

from . import attention as _kernels
from . import ops as _ops


def attention(q, k, v, scale: float | None = None):
    return _kernels.attention(q, k, v, scale=scale, kernel="jnp")


def __getattr__(name: str):
    return getattr(_ops, name)
