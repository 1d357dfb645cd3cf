"""The `ops` namespace for JAX: the same names and semantics as `backends/torch/ops.py`.

`parallel_wan/models/` runs unchanged on either module. Conventions shared with the torch
module (read its docstring): dtypes named by strings, PyTorch layouts (linear weights
(out, in); convs channels-first, weights (out, in, k…); attention (batch, tokens, heads,
head_dim)), nothing mutates its inputs. Where torch's definition has a detail that moves
numbers (where an epsilon sits, tanh-GELU, round half to even, chunk sizes, `squeeze` of a
non-1 axis being a no-op), this module follows torch, so the two backends agree to fp32
rounding.

JAX specifics:
- Everything works both eagerly and under `jax.jit` / `jax.shard_map` tracing; the host-side
  arguments (shapes, axes, `take` indices, conv padding) must be Python values.
- `scan_layers` runs ONE `lax.scan` over per-layer params stacked along a leading axis
  (`placement.stack_layers`), so the traced program, and its compile time, do not grow with
  the layer count.
- float64 exists only with `jax_enable_x64`; without it `asarray` of float64 host data gives
  float32 (the models build their float64 tables on the host and cast them to float32).
- fp32 matmuls and convs run at XLA's default precision; on TPU that is a bf16 pass unless
  the caller sets `jax_default_matmul_precision` ("highest" for fp32 parity runs).
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...models import elementwise as _elementwise
from . import attention as _kernels  # imports nothing from this module

name = "jax"
_this = sys.modules[__name__]  # this namespace, handed to the ops written against `ops`

_DTYPES = {
    "float32": jnp.float32,
    "bfloat16": jnp.bfloat16,
    "float16": jnp.float16,
    "float64": jnp.float64,
    "int64": jnp.int64,
    "int32": jnp.int32,
    "uint8": jnp.uint8,
    "bool": jnp.bool_,
}


def dtype(dtype_name: str):
    return _DTYPES[dtype_name]


def dtype_name(x) -> str:
    return np.dtype(x.dtype).name  # ml_dtypes names bfloat16 "bfloat16", as the table does


def cast(x, dtype_name: str):
    return x.astype(_DTYPES[dtype_name])


def cast_like(x, like):
    return x.astype(like.dtype)


# ---------------------------------------------------------------- creation and host transfer
def asarray(x, dtype_name: str | None = None, like=None):
    """Host data (numpy, python numbers) to a device array. `like` is accepted for the torch
    signature; JAX places constants where the computation runs."""
    del like
    return jnp.asarray(x, dtype=None if dtype_name is None else _DTYPES[dtype_name])


def to_numpy(x) -> np.ndarray:
    """bfloat16 comes back as float32, as the torch backend's `to_numpy` gives it."""
    out = np.asarray(jax.device_get(x))
    return out.astype(np.float32) if out.dtype == jnp.bfloat16 else out


def zeros(shape: Sequence[int], dtype_name: str = "float32", like=None):
    del like
    return jnp.zeros(tuple(shape), dtype=_DTYPES[dtype_name])


def zeros_like(x):
    return jnp.zeros_like(x)


def ones_like(x):
    return jnp.ones_like(x)


def full_like(x, value: float):
    return jnp.full_like(x, value)


# ---------------------------------------------------------------- shape
def reshape(x, shape: Sequence[int]):
    return jnp.reshape(x, tuple(shape))


def transpose(x, axes: Sequence[int]):
    return jnp.transpose(x, tuple(axes))


def expand_dims(x, axis: int):
    return jnp.expand_dims(x, axis)


def squeeze(x, axis: int):
    """torch's `squeeze(dim)`: a no-op when that axis is not of size 1 (numpy would raise)."""
    return jnp.squeeze(x, axis) if x.shape[axis] == 1 else x


def broadcast_to(x, shape: Sequence[int]):
    """torch's `expand`: -1 keeps the existing size of that (trailing-aligned) axis."""
    shape = tuple(shape)
    lead = len(shape) - x.ndim
    shape = tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(shape))
    return jnp.broadcast_to(x, shape)


def concat(xs: Sequence, axis: int):
    return jnp.concatenate(list(xs), axis=axis)


def stack(xs: Sequence, axis: int = 0):
    return jnp.stack(list(xs), axis=axis)


def split(x, sizes: Sequence[int] | int, axis: int) -> list:
    """`sizes` is a list of section sizes, or an int = number of sections with torch.chunk's
    sizes (each ceil(n / sections), the last smaller)."""
    n = x.shape[axis]
    if isinstance(sizes, int):
        step = -(-n // sizes)
        sizes = [builtins.min(step, n - start) for start in range(0, n, step)]
    bounds = np.cumsum(list(sizes))[:-1].tolist()
    return list(jnp.split(x, bounds, axis=axis))


def pad(x, widths: Sequence[tuple[int, int]], value: float = 0.0):
    """`widths` holds one (before, after) pair per axis, numpy style."""
    return jnp.pad(x, [tuple(w) for w in widths], constant_values=value)


def repeat(x, repeats: int, axis: int):
    """Each element repeated `repeats` times along `axis` (numpy.repeat / repeat_interleave)."""
    return jnp.repeat(x, repeats, axis=axis)


def tile(x, reps: Sequence[int]):
    return jnp.tile(x, tuple(reps))


def take(x, index, axis: int):
    """Rows `index` (host ints) of `x` along `axis`."""
    return jnp.take(x, jnp.asarray(np.asarray(index)), axis=axis)


def where(cond, a, b):
    return jnp.where(cond, a, b)


# ---------------------------------------------------------------- elementwise and reductions
exp = jnp.exp
log = jnp.log
sin = jnp.sin
cos = jnp.cos
sqrt = jnp.sqrt
rsqrt = lax.rsqrt
tanh = jnp.tanh
abs = jnp.abs
square = jnp.square
maximum = jnp.maximum
minimum = jnp.minimum


def clip(x, lo: float, hi: float):
    return jnp.clip(x, lo, hi)


def round(x):
    """Half to even, as torch.round (jnp.round rounds half to even too)."""
    return jnp.round(x)


def sum(x, axis=None, keepdims: bool = False):
    return jnp.sum(x, axis=axis, keepdims=keepdims)


def mean(x, axis=None, keepdims: bool = False):
    return jnp.mean(x, axis=axis, keepdims=keepdims)


def silu(x):
    return jax.nn.silu(x)


def gelu(x, approximate: bool = False):
    """approximate=True is torch's "tanh" GELU (same constants, sqrt(2/π) and 0.044715)."""
    return jax.nn.gelu(x, approximate=approximate)


def softmax(x, axis: int = -1):
    return jax.nn.softmax(x, axis=axis)


def matmul(a, b):
    return jnp.matmul(a, b)


def einsum(spec: str, *xs):
    return jnp.einsum(spec, *xs)


# ---------------------------------------------------------------- layers
def linear(x, w, b=None):
    """x @ w.T + b, with w in (out, in) layout. The contraction is written against w's axis 1
    directly so no transposed copy of the weight is made."""
    y = lax.dot_general(x, w, (((x.ndim - 1,), (1,)), ((), ())))
    return y if b is None else y + b


def dense(x, layer):
    """A block's linear layer from its params: `weight` (out, in), `bias`, and for a quantized
    weight (int8 / float8) its `weight_scale` (out, G), widened here to x's dtype — inside the
    layer scan, so only one layer's wide copy is live at a time."""
    w = layer["weight"]
    scale = layer.get("weight_scale")
    if scale is not None:
        w = widen(w, scale, x.dtype)
    return linear(x, w, layer.get("bias"))


def widen(q, scale, dtype):
    """W = q · scale in float32, then cast: q (…, out, in) int8/float8, scale (…, out, G) float32
    with G dividing `in` (G = 1: one scale per output channel; G > 1: per block of in/G inputs)."""
    *lead, rows, cols = q.shape
    groups = scale.shape[-1]
    w = q.astype(jnp.float32).reshape(*lead, rows, groups, cols // groups) * scale.astype(jnp.float32)[..., None]
    return w.reshape(q.shape).astype(dtype)


def _half(x) -> bool:
    return x.dtype in (jnp.bfloat16, jnp.float16)


def layer_norm(x, w=None, b=None, eps: float = 1e-6):
    """LayerNorm over the last axis: (x - mean) / sqrt(biased var + eps) · w + b. Like torch,
    half-precision inputs are normalised in float32 and the result has x's dtype."""
    xf = x.astype(jnp.float32) if _half(x) else x
    mu = jnp.mean(xf, axis=-1, keepdims=True)
    centered = xf - mu
    var = jnp.mean(jnp.square(centered), axis=-1, keepdims=True)
    y = centered * lax.rsqrt(var + eps)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y.astype(x.dtype)


def rms_norm(x, w=None, eps: float = 1e-6):
    """torch.nn.RMSNorm semantics over the last axis: x / sqrt(mean(x²) + eps) · w. Like torch,
    half-precision inputs are normalised in float32 and cast back before the gain."""
    xf = x.astype(jnp.float32) if _half(x) else x
    y = (xf * lax.rsqrt(jnp.mean(jnp.square(xf), axis=-1, keepdims=True) + eps)).astype(x.dtype)
    return y if w is None else y * w


def l2_normalize(x, axis: int, eps: float = 1e-12):
    """F.normalize semantics: x / max(‖x‖₂, eps) along `axis` (eps clamps the norm, it is not
    added under the root)."""
    norm = jnp.sqrt(jnp.sum(jnp.square(x), axis=axis, keepdims=True))
    return x / jnp.maximum(norm, eps)


def _conv(x, w, b, stride, padding, spatial: str):
    dims = ("NC" + spatial, "OI" + spatial, "NC" + spatial)
    y = lax.conv_general_dilated(
        x, w, window_strides=tuple(stride), padding=[(p, p) for p in padding], dimension_numbers=dims
    )
    if b is not None:
        y = y + jnp.reshape(b, (1, -1) + (1,) * len(spatial))
    return y


def conv3d(x, w, b=None, stride=(1, 1, 1), padding=(0, 0, 0)):
    """(N, C, T, H, W) input, (out, in, kt, kh, kw) weight; padding is symmetric zeros per axis."""
    return _conv(x, w, b, stride, padding, "DHW")


def conv2d(x, w, b=None, stride=(1, 1), padding=(0, 0)):
    """(N, C, H, W) input, (out, in, kh, kw) weight."""
    return _conv(x, w, b, stride, padding, "HW")


def attention(q, k, v, scale: float | None = None):
    """Plain full attention: (B, S, H, D) × (B, L, H, D) → (B, S, H, D); no mask. The kernel
    is chosen per platform (backends/jax/attention.py)."""
    return _kernels.attention(q, k, v, scale=scale)


# ---------------------------------------------------------------- control flow
def scan_layers(block_fn: Callable, carry, layers, gather: Callable | None = None):
    """Apply `block_fn(carry, layer_params)` for each layer in order, as ONE `lax.scan` over
    params stacked along a leading layer axis. A Python list of per-layer trees (the torch
    layout) is stacked here first, which copies every weight on each call: place params with
    `placement.stack_layers` to have them stacked once.

    gather: applied to each layer's params inside the scan body, before the block sees them —
    memory=sharded passes `placement.all_gather_params`'s `gather_layer`, which all-gathers one
    layer's shards there, so only one layer is ever whole on a device. With it bound
    (`functools.partial(scan_layers, gather=…)`) this is the model's block runner under FSDP."""
    if isinstance(layers, (list, tuple)):
        layers = jax.tree.map(lambda *xs: jnp.stack(xs), *layers)

    def step(c, layer):
        if gather is not None:
            layer = gather(layer)
        return block_fn(c, layer), None

    carry, _ = lax.scan(step, carry, layers)
    return carry


def num_layers(layers) -> int:
    if isinstance(layers, (list, tuple)):
        return len(layers)
    return jax.tree.leaves(layers)[0].shape[0]


def detach_copy(x):
    """JAX arrays never alias a larger buffer once a program is compiled: the slice is its own
    array already (torch's ops copy here; see there)."""
    return x


# The block's elementwise ops, unfused: XLA fuses them into its own kernels (models/elementwise.py).
def norm_modulate(x, scale, shift, eps: float = 1e-6):
    return _elementwise.norm_modulate(x, scale, shift, eps, _this)


def gated_residual(x, y, gate):
    return _elementwise.gated_residual(x, y, gate, _this)


def rms_norm_rope(x, weight, eps: float, heads: int, cos, sin):
    return _elementwise.rms_norm_rope(x, weight, eps, heads, cos, sin, _this)
