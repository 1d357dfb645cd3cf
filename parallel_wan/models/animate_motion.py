"""Wan2.2-Animate's motion encoder, written once against `ops` (issue 42): each face crop (a
square `size` × `size` RGB image of the driving video's face) becomes one motion vector. A
StyleGAN-style appearance encoder (equalised-learning-rate convolutions, blurred stride-2
downsampling, scaled leaky ReLUs, residual blocks halving the size down to 4×4, a 4×4
convolution to a vector), then `motion_blocks` linear layers to `motion_dim` coefficients, and
the coefficients as the weights of an orthonormal motion basis (the QR factor of
`motion_synthesis_weight`).

Equal to diffusers' `WanAnimateMotionEncoder` (tests/unit/test_animate_face.py), parameter names
as diffusers stores them (`motion_encoder.…`).
"""

from __future__ import annotations

import math

import numpy as np

# StyleGAN's scaled leaky ReLU: slope 0.2, then × √2 (keeps the activations' variance)
SLOPE, GAIN = 0.2, math.sqrt(2.0)
BLUR = (1, 3, 3, 1)  # the FIR filter before every stride-2 convolution (outer product, normalised)


def _leaky(x, bias, ops):
    """The fused leaky ReLU of a convolution's output (N, C, H, W): per-channel bias, then
    max(x, 0.2·x)·√2."""
    x = x + ops.reshape(ops.cast_like(bias, x), (1, bias.shape[0], 1, 1))
    return ops.maximum(x, SLOPE * x) * GAIN


def _blur(x, pad: int, ops):
    """The depthwise FIR blur of every channel (a 4×4 outer product of BLUR over its sum), zero
    padded by `pad` on every side: one 1-channel convolution over the channels folded into the
    batch."""
    n, c, h, w = x.shape
    taps = np.asarray(BLUR, np.float64)
    kernel = np.outer(taps, taps) / np.outer(taps, taps).sum()
    y = ops.conv2d(
        ops.reshape(x, (n * c, 1, h, w)),
        ops.asarray(kernel[None, None], ops.dtype_name(x), like=x),
        padding=(pad, pad),
    )
    return ops.reshape(y, (n, c, y.shape[-2], y.shape[-1]))


def _conv(x, p: dict, ops, stride: int = 1, padding: int = 0, blur: bool = False, act: bool = True):
    """An equalised-learning-rate convolution (weight × 1/√(fan in)); `blur` before a stride-2
    one (padding as diffusers derives it: len(BLUR) − stride + kernel − 1 split over both sides,
    an even number for every convolution here); the bias goes into the leaky ReLU when `act`."""
    w = p["weight"]
    k, c_in = w.shape[-1], w.shape[1]
    if blur:
        x = _blur(x, (len(BLUR) - stride + k - 1) // 2, ops)
    scale = 1.0 / math.sqrt(c_in * k * k)
    x = ops.conv2d(x, w * scale, None if act else p.get("bias"), stride=(stride, stride), padding=(padding, padding))
    return _leaky(x, p["act_fn"]["bias"], ops) if act else x


def _linear(x, p: dict, ops):
    w = p["weight"]
    return ops.linear(x, w * (1.0 / math.sqrt(w.shape[1])), p.get("bias"))


def motion_basis(weight: np.ndarray) -> np.ndarray:
    """The orthonormal motion basis (out_dim, motion_dim): Q of the QR factorisation of
    `motion_synthesis_weight` + 1e-8, in float64 on the host (ops has no QR; diffusers computes
    it in float32 — 1e-7 apart)."""
    q, _ = np.linalg.qr(np.asarray(weight, np.float64) + 1e-8)
    return q


def motion_encoder(p: dict, faces, ops, basis=None):
    """Face crops (N, 3, size, size) in [-1, 1] → motion vectors (N, out_dim). Run once per
    segment (models/animate_transformer.segment_inputs), so the basis's host QR is too.
    `basis`: `motion_basis` of the weight made beforehand (a compiled program cannot take the
    weight to the host); None: made here."""
    x = _conv(faces, p["conv_in"], ops)
    for block in p["res_blocks"]:
        out = _conv(
            _conv(x, block["conv1"], ops, padding=block["conv1"]["weight"].shape[-1] // 2),
            block["conv2"],
            ops,
            stride=2,
            blur=True,
        )
        skip = _conv(x, block["conv_skip"], ops, stride=2, blur=True, act=False)
        x = (out + skip) * (1.0 / math.sqrt(2.0))
    x = _conv(x, p["conv_out"], ops, act=False)  # (N, style_dim, 1, 1)
    feat = ops.reshape(x, (x.shape[0], x.shape[1]))
    for layer in p["motion_network"]:
        feat = _linear(feat, layer, ops)
    if basis is None:
        basis = motion_basis(ops.to_numpy(p["motion_synthesis_weight"]))
    q = ops.cast(ops.asarray(basis, "float32", like=feat), "float32")
    return ops.cast_like(ops.matmul(ops.cast(feat, "float32"), ops.transpose(q, (1, 0))), feat)
