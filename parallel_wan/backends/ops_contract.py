"""The `ops` namespace a backend gives the model, written down: every name the model (models/),
the samplers (sampling/), the step caches (caching/), the loop (pipeline/) and the weights'
in-memory forms (weights/) may call, with its signature and meaning.

`models/` is written once against this namespace; `backends/torch/ops.py`, `backends/jax/ops.py`
and the numpy backend the tests write from the contract (tests/harness/numpy_backend.py)
implement it. tests/unit/test_ops_contract.py checks that every backend has every name with
compatible parameters, and that code above backends/ calls nothing that is not here — so a new
backend knows exactly what to write, and a new op is added here first.

Arrays are the backend's own; `dtype_name`s are "float32", "bfloat16", "float16", "float64",
"int64", …; axes are numpy's (negative counts from the end). Plain data: no torch, no jax.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

Array = Any


@runtime_checkable
class Ops(Protocol):
    name: str  # the backend's name, for messages

    # ---------------------------------------------------------------- dtypes and host data
    def dtype(self, dtype_name: str) -> Any:
        """The backend's dtype object for a name."""

    def dtype_name(self, x: Array) -> str:
        """The name of `x`'s dtype."""

    def cast(self, x: Array, dtype_name: str) -> Array: ...

    def cast_like(self, x: Array, like: Array) -> Array: ...

    def asarray(self, x, dtype_name: str | None = None, like: Array | None = None) -> Array:
        """Host data (numpy, python numbers) onto the device of `like` (float64 stays float64
        unless a dtype is named)."""

    def to_numpy(self, x: Array):
        """A host numpy copy (bfloat16 widened to float32)."""

    def detach_copy(self, x: Array) -> Array:
        """An array that owns its memory (a slice kept past the op that made it)."""

    # ---------------------------------------------------------------- creation
    def zeros(self, shape: Sequence[int], dtype_name: str = "float32", like: Array | None = None) -> Array: ...

    def zeros_like(self, x: Array) -> Array: ...

    def ones_like(self, x: Array) -> Array: ...

    def full_like(self, x: Array, value: float) -> Array: ...

    # ---------------------------------------------------------------- layout
    def reshape(self, x: Array, shape: Sequence[int]) -> Array: ...

    def transpose(self, x: Array, axes: Sequence[int]) -> Array: ...

    def expand_dims(self, x: Array, axis: int) -> Array: ...

    def squeeze(self, x: Array, axis: int) -> Array: ...

    def broadcast_to(self, x: Array, shape: Sequence[int]) -> Array: ...

    def concat(self, xs: Sequence[Array], axis: int) -> Array: ...

    def stack(self, xs: Sequence[Array], axis: int = 0) -> Array: ...

    def split(self, x: Array, sizes: Sequence[int] | int, axis: int) -> list:
        """Sections of the given sizes, or `sizes` equal sections."""

    def pad(self, x: Array, widths: Sequence[tuple[int, int]], value: float = 0.0) -> Array:
        """One (before, after) pair per axis, numpy style."""

    def repeat(self, x: Array, repeats: int, axis: int) -> Array:
        """Each element `repeats` times along `axis` (numpy.repeat)."""

    def tile(self, x: Array, reps: Sequence[int]) -> Array: ...

    def take(self, x: Array, index, axis: int) -> Array:
        """Rows `index` (host ints) along `axis`."""

    def where(self, cond: Array, a, b) -> Array: ...

    # ---------------------------------------------------------------- elementwise and reductions
    def abs(self, x: Array) -> Array: ...

    def exp(self, x: Array) -> Array: ...

    def log(self, x: Array) -> Array: ...

    def sin(self, x: Array) -> Array: ...

    def cos(self, x: Array) -> Array: ...

    def tanh(self, x: Array) -> Array: ...

    def sqrt(self, x: Array) -> Array: ...

    def rsqrt(self, x: Array) -> Array: ...

    def square(self, x: Array) -> Array: ...

    def maximum(self, a: Array, b) -> Array: ...

    def minimum(self, a: Array, b) -> Array: ...

    def clip(self, x: Array, lo: float, hi: float) -> Array: ...

    def round(self, x: Array) -> Array: ...

    def sum(self, x: Array, axis=None, keepdims: bool = False) -> Array: ...

    def mean(self, x: Array, axis=None, keepdims: bool = False) -> Array: ...

    def silu(self, x: Array) -> Array: ...

    def gelu(self, x: Array, approximate: bool = False) -> Array: ...

    def softmax(self, x: Array, axis: int = -1) -> Array: ...

    # ---------------------------------------------------------------- products and layers
    def matmul(self, a: Array, b: Array) -> Array: ...

    def einsum(self, spec: str, *xs: Array) -> Array: ...

    def linear(self, x: Array, w: Array, b: Array | None = None) -> Array:
        """x @ w.T + b, w in (out, in) layout."""

    def dense(self, x: Array, layer: dict) -> Array:
        """A block's linear layer from its params (`weight`, `bias`; a quantized weight with its
        `weight_scale` is widened or multiplied as the backend decides)."""

    def widen(self, q: Array, scale: Array, dtype) -> Array:
        """W = q · scale in float32, then cast (q: int8/float8 (…, out, in); scale (…, out, G))."""

    def layer_norm(self, x: Array, w=None, b=None, eps: float = 1e-6) -> Array:
        """LayerNorm over the last axis, in x's dtype."""

    def rms_norm(self, x: Array, w=None, eps: float = 1e-6) -> Array:
        """x / sqrt(mean(x²) + eps) · w over the last axis."""

    # the elementwise work around a block's matmuls (models/elementwise.py says what each means;
    # a backend may fuse each into one kernel that equals it within an ulp)
    def norm_modulate(self, x: Array, scale: Array, shift: Array, eps: float = 1e-6) -> Array:
        """LayerNorm of x in float32 (no affine) · (1 + scale) + shift, in x's dtype."""

    def gated_residual(self, x: Array, y: Array, gate: Array) -> Array:
        """x + y · gate in float32, in x's dtype."""

    def rms_norm_rope(self, x: Array, weight: Array, eps: float, heads: int, cos: Array, sin: Array) -> Array:
        """RMSNorm of x (B, L, dim) with `weight`, as heads (B, L, heads, dim/heads), rotated by RoPE."""

    def l2_normalize(self, x: Array, axis: int, eps: float = 1e-12) -> Array:
        """x / max(‖x‖₂, eps) along `axis` (F.normalize)."""

    def conv3d(self, x: Array, w: Array, b=None, stride=(1, 1, 1), padding=(0, 0, 0)) -> Array:
        """(N, C, T, H, W) input, (out, in, kt, kh, kw) weight, symmetric zero padding."""

    def conv2d(self, x: Array, w: Array, b=None, stride=(1, 1), padding=(0, 0)) -> Array:
        """(N, C, H, W) input, (out, in, kh, kw) weight."""

    def attention(self, q: Array, k: Array, v: Array, scale: float | None = None) -> Array:
        """Full attention (B, S, H, D) × (B, L, H, D) → (B, S, H, D), no mask (the model's cross
        attention; self-attention is the backend's sequence-parallel callable)."""

    # ---------------------------------------------------------------- the layer stack
    def scan_layers(self, block_fn: Callable, carry, layers):
        """`block_fn(carry, layer_params)` for each layer in order (JAX: one lax.scan)."""

    def num_layers(self, layers) -> int: ...


def ops_names() -> frozenset[str]:
    """Every name a backend's ops must provide."""
    names = {n for n in vars(Ops) if not n.startswith("_")} | set(Ops.__annotations__)
    return frozenset(names)
