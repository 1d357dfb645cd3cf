"""The `ops` namespace for programs that XLA's SPMD partitioner splits by itself (a jit over
sharded or replicated arrays, no `shard_map`): the VAE decode split by height, the image encode.

Pallas/Mosaic kernels — splash attention, which `ops.attention` picks on TPU — cannot be
partitioned automatically: XLA:TPU refuses them outside `shard_map` ("Mosaic kernels cannot be
automatically partitioned"; found by compiling the decode ahead of time for a v5p slice,
tests/gpu/test_tpu_aot.py). Here attention is the plain jnp kernel instead, which the partitioner
splits like any einsum (the VAE's one-head attention over a frame's pixels: each device its
rows of queries against the gathered keys).

On the CPU the convolutions are cpu_convs' channels-last 2-D ones, the only form XLA:CPU runs
with its library kernel inside the decode's scan (a choice made while tracing, like the kernel
above: TPU and GPU programs keep ops' convolutions). Every other op is `ops`' own.
"""

from __future__ import annotations

from . import attention as _kernels, cpu_convs, ops as _ops, target_platform


def attention(q, k, v, scale: float | None = None):
    return _kernels.attention(q, k, v, scale=scale, kernel="jnp")


def conv3d(x, w, b=None, stride=(1, 1, 1), padding=(0, 0, 0)):
    convs = cpu_convs if target_platform.current() == "cpu" else _ops
    return convs.conv3d(x, w, b, stride, padding)


def conv2d(x, w, b=None, stride=(1, 1), padding=(0, 0)):
    convs = cpu_convs if target_platform.current() == "cpu" else _ops
    return convs.conv2d(x, w, b, stride, padding)


def __getattr__(name: str):
    return getattr(_ops, name)
