"""The VAE's convolutions as XLA:CPU runs them fast: channels-last 2-D convolutions.

XLA:CPU hands a convolution to its library kernel (Eigen / YNNPACK) only in one form: 2-D,
channels-last (NHWC input, HWIO kernel). Its ConvCanonicalization pass rewrites other layouts
into that form, but only for the top-level convolutions of a program (the entry computation,
xla/service/cpu/conv_canonicalization.h); the VAE decode's convolutions sit in the body of its
`lax.scan` over latent frames, where they stayed channels-first and were emitted as generic
loop nests. And a 3-D convolution, even channels-last, runs ~5× slower than the same sums done
as one 2-D convolution. Together: the tiny model's decode took ~25× torch's time on CPU
(BENCHMARKS.md "JAX VAE decode on CPU (issue 38)").

So on the CPU the VAE's programs (spmd_ops) write every convolution in that form themselves,
wherever it sits: NCHW ↔ NHWC transposes around a 2-D conv, and a 3-D conv with `kt` time taps
as ONE 2-D conv over the `kt` time-shifted frames stacked along channels (kt·C input
channels; the kernel's taps reshaped to match). One conv instead of a sum of `kt` convs: the
sum compiled 1.7× longer and ran slower (XLA does not fuse the adds into the conv). The
stacked input costs kt× the conv's input in memory, which a CPU run of the VAE can afford.

Same sums in another order: the frames stay within a uint8 level of the 3-D conv's. Only the
CPU takes this path; TPU and GPU programs (and the TPU ahead-of-time compiles) trace the plain
channels-first convolutions of ops.py, unchanged.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

_NHWC = ("NHWC", "HWIO", "NHWC")


def _conv2d_nhwc(x, w_hwio, stride, padding):
    return lax.conv_general_dilated(x, w_hwio, tuple(stride), [(p, p) for p in padding], dimension_numbers=_NHWC)


def conv2d(x, w, b=None, stride=(1, 1), padding=(0, 0)):
    """ops.conv2d's contract ((N, C, H, W) input, (out, in, kh, kw) weight), run channels-last."""
    y = _conv2d_nhwc(jnp.transpose(x, (0, 2, 3, 1)), jnp.transpose(w, (2, 3, 1, 0)), stride, padding)
    if b is not None:
        y = y + b
    return jnp.transpose(y, (0, 3, 1, 2))


def conv3d(x, w, b=None, stride=(1, 1, 1), padding=(0, 0, 0)):
    """ops.conv3d's contract ((N, C, T, H, W) input, (out, in, kt, kh, kw) weight, symmetric zero
    padding), run as one channels-last 2-D conv over the time taps stacked along channels."""
    n, c, _, h, wd = x.shape
    out, _, kt, kh, kw = w.shape
    st, sh, sw = stride
    pt, ph, pw = padding
    frames = jnp.transpose(x, (0, 2, 3, 4, 1))  # (N, T, H, W, C)
    if pt:
        frames = jnp.pad(frames, [(0, 0), (pt, pt), (0, 0), (0, 0), (0, 0)])
    t_out = (frames.shape[1] - kt) // st + 1
    last = (t_out - 1) * st + 1
    # output frame j reads input frames j·st + k for the taps k = 0 … kt-1: channel block k
    taps = jnp.concatenate([frames[:, k : k + last : st] for k in range(kt)], axis=-1)
    taps = jnp.reshape(taps, (n * t_out, h, wd, kt * c))
    kernel = jnp.reshape(jnp.transpose(w, (3, 4, 2, 1, 0)), (kh, kw, kt * c, out))  # (kh, kw, [tap, in], out)
    y = _conv2d_nhwc(taps, kernel, (sh, sw), (ph, pw))
    if b is not None:
        y = y + b
    y = jnp.reshape(y, (n, t_out) + y.shape[1:])
    return jnp.transpose(y, (0, 4, 1, 2, 3))
