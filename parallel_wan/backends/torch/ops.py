"""The `ops` namespace for PyTorch: every array operation `parallel_wan/models/` may call.

The model code never imports torch; it receives this module as `ops`. A JAX module with the
same names and semantics lives in `backends/jax/ops.py`. Conventions both follow:

- dtypes are named by strings: "float32", "bfloat16", "float16", "float64".
- layouts are PyTorch's: linear weights (out, in); conv inputs channels-first (N, C, [T,] H, W);
  attention inputs (batch, tokens, heads, head_dim).
- arithmetic operators (+ - * /, comparison) and `.shape` / `.ndim` / basic slicing work on
  arrays of both backends, so the model uses them directly; everything else goes through here.
- nothing here mutates its inputs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from parallel_wan.weights.quantized.form import dequantize

from ...models import elementwise
from . import fused

name = "torch"

_DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "uint8": torch.uint8,
}
_NAMES = {v: k for k, v in _DTYPES.items()}


def dtype(dtype_name: str) -> torch.dtype:
    return _DTYPES[dtype_name]


def dtype_name(x: torch.Tensor) -> str:
    return _NAMES[x.dtype]


def cast(x: torch.Tensor, dtype_name: str) -> torch.Tensor:
    return x.to(_DTYPES[dtype_name])


def cast_like(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return x.type_as(like)


# ---------------------------------------------------------------- creation and host transfer
# New arrays go where the array they are made for lives (`like=`, which the model always
# passes), else on the CPU: no process-wide default device to set.
_HOST = torch.device("cpu")


# Small host constants the model makes on every forward (the timestep frequencies, the VAE's
# latent mean/std) are copied to an accelerator once and reused: a copy from pageable host
# memory waits for the device's queue, which would put a host synchronisation into every step.
# The model code never writes into them.
_CONSTANTS: dict = {}
_CONSTANT_MAX_ELEMENTS = 1 << 16


def asarray(x, dtype_name: str | None = None, like: torch.Tensor | None = None) -> torch.Tensor:
    """Host data (numpy, python numbers) to a device array; float64 numpy stays float64 unless
    a dtype is given. Small numpy constants bound for a non-CPU device are cached (read-only)."""
    device = like.device if like is not None else _HOST
    torch_device = torch.device(device)
    if isinstance(x, np.ndarray) and torch_device.type != "cpu" and x.size <= _CONSTANT_MAX_ELEMENTS:
        key = (str(torch_device), x.dtype.str, x.shape, x.tobytes(), dtype_name)
        if key not in _CONSTANTS:
            t = torch.as_tensor(x, device=torch_device)
            _CONSTANTS[key] = t.to(_DTYPES[dtype_name]) if dtype_name else t
        return _CONSTANTS[key]
    t = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x, device=device)
    return t.to(_DTYPES[dtype_name]) if dtype_name else t


def to_numpy(x: torch.Tensor) -> np.ndarray:
    if x.dtype == torch.bfloat16:
        x = x.float()
    return x.detach().cpu().numpy()


def zeros(shape: Sequence[int], dtype_name: str = "float32", like: torch.Tensor | None = None) -> torch.Tensor:
    device = like.device if like is not None else _HOST
    return torch.zeros(tuple(shape), dtype=_DTYPES[dtype_name], device=device)


def zeros_like(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(x)


def ones_like(x: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(x)


def full_like(x: torch.Tensor, value: float) -> torch.Tensor:
    return torch.full_like(x, value)


# ---------------------------------------------------------------- shape
def reshape(x: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    return x.reshape(tuple(shape))


def transpose(x: torch.Tensor, axes: Sequence[int]) -> torch.Tensor:
    return x.permute(*axes)


def expand_dims(x: torch.Tensor, axis: int) -> torch.Tensor:
    return x.unsqueeze(axis)


def squeeze(x: torch.Tensor, axis: int) -> torch.Tensor:
    return x.squeeze(axis)


def broadcast_to(x: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    return x.expand(*shape)


def concat(xs: Sequence[torch.Tensor], axis: int) -> torch.Tensor:
    return torch.cat(list(xs), dim=axis)


def stack(xs: Sequence[torch.Tensor], axis: int = 0) -> torch.Tensor:
    return torch.stack(list(xs), dim=axis)


def split(x: torch.Tensor, sizes: Sequence[int] | int, axis: int) -> list[torch.Tensor]:
    """`sizes` is a list of section sizes, or an int = number of equal sections."""
    if isinstance(sizes, int):
        return list(torch.chunk(x, sizes, dim=axis))
    return list(torch.split(x, list(sizes), dim=axis))


def pad(x: torch.Tensor, widths: Sequence[tuple[int, int]], value: float = 0.0) -> torch.Tensor:
    """`widths` holds one (before, after) pair per axis, numpy style."""
    flat: list[int] = []
    for lo, hi in reversed(list(widths)):
        flat += [lo, hi]
    return F.pad(x, flat, value=value)


def repeat(x: torch.Tensor, repeats: int, axis: int) -> torch.Tensor:
    """Each element repeated `repeats` times along `axis` (numpy.repeat / repeat_interleave)."""
    return torch.repeat_interleave(x, repeats, dim=axis)


def tile(x: torch.Tensor, reps: Sequence[int]) -> torch.Tensor:
    return x.repeat(*reps)


def take(x: torch.Tensor, index, axis: int) -> torch.Tensor:
    """Rows `index` (host ints) of `x` along `axis`."""
    idx = torch.as_tensor(np.asarray(index), device=x.device, dtype=torch.long)
    return torch.index_select(x, axis, idx)


def where(cond: torch.Tensor, a, b) -> torch.Tensor:
    return torch.where(cond, a, b)


# ---------------------------------------------------------------- elementwise and reductions
exp = torch.exp
log = torch.log
sin = torch.sin
cos = torch.cos
sqrt = torch.sqrt
rsqrt = torch.rsqrt
tanh = torch.tanh
abs = torch.abs
square = torch.square
maximum = torch.maximum
minimum = torch.minimum


def clip(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    return torch.clamp(x, lo, hi)


def round(x: torch.Tensor) -> torch.Tensor:
    return torch.round(x)


def sum(x: torch.Tensor, axis=None, keepdims: bool = False) -> torch.Tensor:
    return x.sum() if axis is None else x.sum(dim=axis, keepdim=keepdims)


def mean(x: torch.Tensor, axis=None, keepdims: bool = False) -> torch.Tensor:
    return x.mean() if axis is None else x.mean(dim=axis, keepdim=keepdims)


def silu(x: torch.Tensor) -> torch.Tensor:
    return F.silu(x)


def gelu(x: torch.Tensor, approximate: bool = False) -> torch.Tensor:
    return F.gelu(x, approximate="tanh" if approximate else "none")


def softmax(x: torch.Tensor, axis: int = -1) -> torch.Tensor:
    return torch.softmax(x, dim=axis)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def einsum(spec: str, *xs: torch.Tensor) -> torch.Tensor:
    return torch.einsum(spec, *xs)


# ---------------------------------------------------------------- layers
def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """x @ w.T + b, with w in (out, in) layout."""
    return F.linear(x, w, b)


def dense(x: torch.Tensor, layer: dict) -> torch.Tensor:
    """A block's linear layer from its params: `weight` (out, in), `bias`, and for a quantized
    weight (int8 / float8) its `weight_scale` (out, G), widened here to x's dtype (NVFP4: the
    packed weight, its e4m3 block scales and `weight_scale_2`)."""
    w = layer["weight"]
    scale = layer.get("weight_scale")
    if scale is not None:
        w = widen(w, scale, x.dtype, layer.get("weight_scale_2"))
    return F.linear(x, w, layer.get("bias"))


def widen(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype, scale_2=None) -> torch.Tensor:
    """W = q · scale in float32, then cast: q (…, out, in) int8/float8, scale (…, out, G) float32
    with G dividing `in` (G = 1: one scale per output channel; G > 1: per block of in/G inputs);
    NVFP4: q (…, out, in/2) packed, scale (…, out, in/16) e4m3, scale_2 (…, out, 1) float32."""
    return dequantize(q, scale, scale_2).to(dtype)


def layer_norm(x: torch.Tensor, w=None, b=None, eps: float = 1e-6) -> torch.Tensor:
    """LayerNorm over the last axis, computed in x's dtype (callers upcast where the reference does)."""
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def rms_norm(x: torch.Tensor, w=None, eps: float = 1e-6) -> torch.Tensor:
    """torch.nn.RMSNorm semantics over the last axis: x / sqrt(mean(x²) + eps) * w."""
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def l2_normalize(x: torch.Tensor, axis: int, eps: float = 1e-12) -> torch.Tensor:
    """F.normalize semantics: x / max(‖x‖₂, eps) along `axis`."""
    if x.device.type == "cpu":
        # The norm as a sum of squares: on CPU torch's vector_norm over an axis that is not the
        # innermost (the VAE's channels) runs 4-10× slower than this (benchmarks/cpu_conv3d.py);
        # the result differs from F.normalize's in the last bit at most.
        return x / x.square().sum(dim=axis, keepdim=True).sqrt().clamp_min(eps)
    return F.normalize(x, dim=axis, eps=eps)


def conv3d(x, w, b=None, stride=(1, 1, 1), padding=(0, 0, 0)) -> torch.Tensor:
    """(N, C, T, H, W) input, (out, in, kt, kh, kw) weight; padding is symmetric zeros per axis."""
    if _onednn_conv3d(x, w, b):
        return torch.ops.aten.mkldnn_convolution(x, w, b, list(padding), list(stride), [1, 1, 1], 1)
    return F.conv3d(x, w, b, stride=tuple(stride), padding=tuple(padding))


def _onednn_conv3d(x, w, b) -> bool:
    """Whether a 3-D convolution goes to oneDNN's kernel directly. On CPU, ATen sends float32
    3-D convolutions with N·C·T·H ≤ 20,480 to its im2col reference kernel (`slow_conv3d`), though
    oneDNN (bundled with every CPU build) runs them: the tiny VAE's 3×3×3 convolutions measured
    2-10× faster there, one decode's 3-D convs 6.3× (one thread: benchmarks/cpu_conv3d.py); the
    same sums in another order (float rounding). Convs without spatial extent (1×1×1, 3×1×1)
    stay with ATen, which is as fast or faster on those. Inference only (no autograd), float32
    CPU tensors, oneDNN enabled (`torch.backends.mkldnn.enabled = False` restores ATen's own
    choice); GPUs and meta tensors keep torch's dispatch."""
    return (
        x.device.type == "cpu"
        and w.shape[-1] * w.shape[-2] > 1
        and x.dtype == w.dtype == torch.float32
        and (b is None or b.dtype == torch.float32)
        and not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad))
        and torch.backends.mkldnn.enabled
        and torch.backends.mkldnn.is_available()
    )


def conv2d(x, w, b=None, stride=(1, 1), padding=(0, 0)) -> torch.Tensor:
    """(N, C, H, W) input, (out, in, kh, kw) weight."""
    return F.conv2d(x, w, b, stride=tuple(stride), padding=tuple(padding))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Plain full attention: (B, S, H, D) × (B, L, H, D) → (B, S, H, D); no mask."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=scale)
    return out.transpose(1, 2)


# ---------------------------------------------------------------- control flow
def scan_layers(block_fn: Callable, carry, layers):
    """Apply `block_fn(carry, layer_params)` for each layer in order. Torch keeps the layers as
    a list of param dicts; JAX stacks them and runs one `lax.scan`."""
    for layer in layers:
        carry = block_fn(carry, layer)
    return carry


def num_layers(layers) -> int:
    return len(layers)


def detach_copy(x: torch.Tensor) -> torch.Tensor:
    """A tensor that owns its memory: a slice kept past the op that made it (the VAE's causal
    frame cache) must not hold the whole larger tensor it was cut from alive."""
    return x.clone(memory_format=torch.contiguous_format)


# ---------------------------------------------------------------- the block's elementwise work
# One Triton kernel each on CUDA in eager mode (fused.py); the unfused ops elsewhere.
_this = sys.modules[__name__]


def norm_modulate(x: torch.Tensor, scale, shift, eps: float = 1e-6) -> torch.Tensor:
    if fused.runs(x):
        return fused.kernels().norm_modulate(x, scale, shift, eps)
    return elementwise.norm_modulate(x, scale, shift, eps, _this)


def gated_residual(x: torch.Tensor, y: torch.Tensor, gate) -> torch.Tensor:
    if fused.runs(x) and y.shape == x.shape:
        return fused.kernels().gated_residual(x, y, gate)
    return elementwise.gated_residual(x, y, gate, _this)


def rms_norm_rope(x: torch.Tensor, weight, eps: float, heads: int, cos, sin) -> torch.Tensor:
    if fused.runs(x) and weight is not None and (x.shape[-1] // heads) % 2 == 0:
        return fused.kernels().rms_norm_rope(x, weight, eps, heads, cos, sin)
    return elementwise.rms_norm_rope(x, weight, eps, heads, cos, sin, _this)
