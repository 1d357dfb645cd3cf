"""A third backend written from backends/contract.py alone: numpy on one device (the CPU), one
process. It exists to prove the contract is complete — that a backend which subclasses the
Protocols and implements their required members runs the real `pipeline.generate` (load, text,
the denoising loop, the VAE decode) with no help from torch's or JAX's backend code.

`ops` implements the model's namespace (every function models/, sampling/ and the loop call)
with numpy; convolutions use sliding windows (fine for the tiny model's sizes). Arrays that
arrive from the loader and the PyTorch text encoder (torch tensors on the host) are turned into
numpy arrays in `place`, `to_device` and `broadcast_from_main`.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from parallel_wan.backends.contract import Backend, NoisePredictor, VideoDecoder
from parallel_wan.models import elementwise, transformer as dit, vae
from parallel_wan.models.rope import rope_tables
from parallel_wan.pipeline import model_inputs
from parallel_wan.report.frames import to_uint8_frames

_DTYPES = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "int64": np.int64,
    "int32": np.int32,
    "uint8": np.uint8,
}


def _np(x):
    """A host array from a numpy array, a python number or a (CPU) torch tensor."""
    if hasattr(x, "detach"):
        x = x.detach().float().numpy() if str(x.dtype) == "torch.bfloat16" else x.detach().numpy()
    return np.asarray(x)


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _conv(x, w, b, stride, padding):
    """N-d convolution (N, C, *spatial) × (out, in, *kernel), zero padding, via sliding windows."""
    nd = w.ndim - 2
    x = np.pad(x, [(0, 0), (0, 0), *[(p, p) for p in padding]])
    windows = np.lib.stride_tricks.sliding_window_view(x, w.shape[2:], axis=tuple(range(2, 2 + nd)))
    windows = windows[(slice(None), slice(None), *[slice(None, None, s) for s in stride])]
    # windows: (N, C, *out_spatial, *kernel) · w: (out, C, *kernel) → (N, *out_spatial, out)
    out = np.tensordot(windows, w, axes=([1, *range(2 + nd, 2 + 2 * nd)], [1, *range(2, 2 + nd)]))
    out = np.moveaxis(out, -1, 1)
    return (out + b.reshape(1, -1, *[1] * nd) if b is not None else out).astype(x.dtype)


def _layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y.astype(x.dtype)


def _attention(q, k, v, scale=None):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = np.einsum("bshd,blhd->bhsl", q, k) * scale
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    return np.einsum("bhsl,blhd->bshd", scores / scores.sum(-1, keepdims=True), v).astype(q.dtype)


def _scan_layers(block_fn, carry, layers):
    for layer in layers:
        carry = block_fn(carry, layer)
    return carry


def _widen(q, scale, dtype):
    """W = q · scale in float32, then cast; a scale of G groups per row covers in/G columns each."""
    q = np.asarray(q, np.float32)
    groups = scale.shape[-1]
    w = (q.reshape(*q.shape[:-1], groups, -1) * np.asarray(scale, np.float32)[..., None]).reshape(q.shape)
    return w.astype(dtype)


ops = SimpleNamespace(
    name="numpy",
    dtype=lambda name: _DTYPES[name],
    dtype_name=lambda x: {v: k for k, v in _DTYPES.items()}[np.dtype(x.dtype).type],
    cast=lambda x, name: np.asarray(x).astype(_DTYPES[name]),
    cast_like=lambda x, like: np.asarray(x).astype(like.dtype),
    asarray=lambda x, dtype_name=None, like=None: _np(x).astype(_DTYPES[dtype_name]) if dtype_name else _np(x),
    to_numpy=lambda x: np.asarray(x),
    zeros=lambda shape, dtype_name="float32", like=None: np.zeros(tuple(shape), _DTYPES[dtype_name]),
    zeros_like=np.zeros_like,
    ones_like=np.ones_like,
    full_like=lambda x, value: np.full_like(x, value),
    reshape=lambda x, shape: np.reshape(x, tuple(shape)),
    transpose=lambda x, axes: np.transpose(x, tuple(axes)),
    expand_dims=np.expand_dims,
    squeeze=np.squeeze,
    broadcast_to=lambda x, shape: np.broadcast_to(x, tuple(shape)),
    concat=lambda xs, axis: np.concatenate(list(xs), axis=axis),
    stack=lambda xs, axis=0: np.stack(list(xs), axis=axis),
    split=lambda x, sizes, axis: (
        np.split(x, sizes, axis=axis) if isinstance(sizes, int) else np.split(x, np.cumsum(sizes)[:-1], axis=axis)
    ),
    pad=lambda x, widths, value=0.0: np.pad(x, list(widths), constant_values=value),
    repeat=lambda x, repeats, axis: np.repeat(x, repeats, axis=axis),
    tile=np.tile,
    take=lambda x, index, axis: np.take(x, np.asarray(index), axis=axis),
    where=lambda cond, a, b: np.where(cond, a, b).astype(np.result_type(a, b)),
    clip=np.clip,
    round=np.round,
    sum=lambda x, axis=None, keepdims=False: np.sum(x, axis=axis, keepdims=keepdims),
    mean=lambda x, axis=None, keepdims=False: np.mean(x, axis=axis, keepdims=keepdims, dtype=x.dtype),
    exp=np.exp,
    log=np.log,
    abs=np.abs,
    tanh=np.tanh,
    sqrt=np.sqrt,
    rsqrt=lambda x: (1.0 / np.sqrt(x)).astype(x.dtype),
    square=np.square,
    maximum=np.maximum,
    minimum=np.minimum,
    widen=lambda q, scale, dtype: _widen(q, scale, dtype),
    sin=np.sin,
    cos=np.cos,
    silu=lambda x: (x / (1.0 + np.exp(-x))).astype(x.dtype),
    gelu=lambda x, approximate=False: (
        (0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))))
        if approximate
        else (0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))))
    ).astype(x.dtype),
    softmax=lambda x, axis=-1: (
        np.exp(x - x.max(axis, keepdims=True)) / np.exp(x - x.max(axis, keepdims=True)).sum(axis, keepdims=True)
    ),
    matmul=np.matmul,
    einsum=lambda spec, *xs: np.einsum(spec, *xs),
    linear=lambda x, w, b=None: (x @ w.T + (0 if b is None else b)).astype(x.dtype),
    dense=lambda x, layer: (x @ layer["weight"].T + layer.get("bias", 0)).astype(x.dtype),  # no quantized weights here
    layer_norm=lambda x, w=None, b=None, eps=1e-6: _layer_norm(x, w, b, eps),
    rms_norm=lambda x, w=None, eps=1e-6: (
        x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (1 if w is None else w)
    ).astype(x.dtype),
    l2_normalize=lambda x, axis, eps=1e-12: x / np.maximum(np.sqrt((x * x).sum(axis, keepdims=True)), eps),
    conv3d=lambda x, w, b=None, stride=(1, 1, 1), padding=(0, 0, 0): _conv(x, w, b, stride, padding),
    conv2d=lambda x, w, b=None, stride=(1, 1), padding=(0, 0): _conv(x, w, b, stride, padding),
    attention=_attention,
    scan_layers=_scan_layers,
    num_layers=len,
    detach_copy=np.copy,
)
# the block's elementwise ops: their meaning, unfused (models/elementwise.py)
ops.norm_modulate = lambda x, scale, shift, eps=1e-6: elementwise.norm_modulate(x, scale, shift, eps, ops)
ops.gated_residual = lambda x, y, gate: elementwise.gated_residual(x, y, gate, ops)
ops.rms_norm_rope = lambda x, weight, eps, heads, cos, sin: elementwise.rms_norm_rope(
    x, weight, eps, heads, cos, sin, ops
)


class NumpyPredictor(NoisePredictor):
    """The guided noise prediction of the whole sequence and every prompt (one controller)."""

    def __init__(self, task):
        self.task = task
        tcfg = next(iter(task.experts.values()))[0]
        self.rope = rope_tables(tcfg.attention_head_dim, task.grid, token_index=task.work.token_index())
        self.context = ops.take(task.context, model_inputs.widest_context_rows(task), axis=0)
        self.cond = task.cond_tokens  # one row, joined to every prompt's tokens
        self.mask = model_inputs.timestep_mask(task)

    def __call__(self, expert, x, t, guidance):
        tcfg, params = self.task.experts[expert]
        layout = model_inputs.step_rows(self.task, expert)
        tokens, ts, context = model_inputs.forward_inputs(layout, x, t, self.context, self.cond, self.mask, ops)
        out = dit.forward(params, tokens, ts, context, self.rope, tcfg, ops, ops.attention)
        return model_inputs.guided_prediction(layout, out.astype(np.float32), guidance)


class NumpyDecoder(VideoDecoder):
    def __init__(self, params, cfg):
        self.params, self.cfg = params, cfg

    def __call__(self, latents):
        return [
            to_uint8_frames(
                vae.decode(self.params, vae.denormalize_latents(latents[i : i + 1], self.cfg, ops), ops, self.cfg), ops
            )
            for i in range(latents.shape[0])
        ]


class NumpyBackend(Backend):
    """Only what the contract requires; every optional member keeps its default."""

    name = "numpy"
    single_controller = True
    device = "numpy (cpu)"
    ops = ops

    def to_device(self, array, dtype=None):
        array = _np(array)
        return array.astype(_DTYPES[dtype]) if dtype else array

    def to_host(self, x):
        return np.asarray(x)

    def place(self, tree, dtype, keep_fp32=None, **placement):
        from parallel_wan.weights.tree import map_leaves

        def move(name, t):
            a = _np(t)
            if not np.issubdtype(a.dtype, np.floating):
                return a
            return a.astype(np.float32 if dtype == "float32" or (keep_fp32 and keep_fp32(name)) else _DTYPES[dtype])

        return map_leaves(move, tree)

    def broadcast_from_main(self, x):
        return _np(x)

    def noise_predictor(self, task):
        return NumpyPredictor(task)

    def video_decoder(self, vae_params, vae_config):
        return NumpyDecoder(vae_params, vae_config)

    def vae_encode(self, params, video, cfg):
        return vae.encode(params, np.asarray(video, np.float32), ops, cfg)
