"""Param trees (torch tensors or numpy arrays, as the weight loaders give them) onto a JAX mesh.

Three things happen, each leaf in one host copy at most:
1. Layer stacking. The transformer's block runner on JAX is `ops.scan_layers(block, x,
   params["blocks"])`, one `lax.scan`, so `params["blocks"]` — a list of per-layer trees in the
   torch layout — becomes ONE tree whose leaves carry a leading layer axis. The rule is
   explicit: only the top-level keys in `SCANNED` are stacked, because those are the runs the
   model scans; every other list (the VAE's up/down blocks, `to_out`, `ffn.net`) stays a list.
2. dtype policy, as the torch backend's `place`: floating leaves become `dtype`, except
   where `keep_fp32(name)` (name = the flat torch name, "blocks.0.norm2.weight" for a stacked
   leaf). bfloat16 sources are viewed as ml_dtypes.bfloat16 (no float32 round trip); a cast,
   when needed, is fused into the one copy that also stacks (numpy casting on assignment).
3. Placement with a `NamedSharding`: replicated by default; with `fsdp_axes`, every leaf of at
   least `fsdp_min_size` elements is sharded along its largest axis divisible by the size of
   those mesh axes (never the stacked layer axis, which the scan walks). `all_gather_params`
   undoes it inside `shard_map`: the non-layer params on entry, and each layer inside the scan
   through the `gather` argument of `ops.scan_layers` (the FSDP block runner).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import ml_dtypes
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

SCANNED = ("blocks",)

_HOST_DTYPES = {
    "float32": np.dtype(np.float32),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float16": np.dtype(np.float16),
}

# Leaves smaller than this stay replicated under FSDP: norms, biases and modulation tables
# cost more in collective latency than they save in memory.
FSDP_MIN_SIZE = 1 << 16


# ---------------------------------------------------------------- host side
def host_array(leaf) -> np.ndarray:
    """A numpy view of a torch tensor, numpy array or JAX array, without changing its dtype
    (torch bfloat16 is reinterpreted bit for bit as ml_dtypes.bfloat16)."""
    if isinstance(leaf, np.ndarray):
        return leaf
    if type(leaf).__module__.startswith("torch"):
        import torch

        t = leaf.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        if t.dtype == torch.float8_e4m3fn:  # a quantized block linear (weights/quantized/), bit for bit
            return t.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
        return t.numpy()
    return np.asarray(leaf)


def _target(name: str, array: np.ndarray, dtype: str | None, keep_fp32) -> np.dtype:
    if dtype is None:
        return array.dtype
    if dtype not in _HOST_DTYPES:
        raise ValueError(
            f"dtype={dtype!r} is not one of {', '.join(_HOST_DTYPES)}; set dtype=bfloat16 or dtype=float32"
        )
    if name.endswith("weight_scale"):  # a quantized weight's scale stays float32; the weight (int8,
        return np.dtype(np.float32)  # float8: not np.floating) keeps its bytes below
    if not (np.issubdtype(array.dtype, np.floating) or array.dtype == _HOST_DTYPES["bfloat16"]):
        return array.dtype  # integers, and float8 weights: widened in the layer (ops.widen) with their scale
    if keep_fp32 is not None and keep_fp32(name):
        return np.dtype(np.float32)
    return _HOST_DTYPES[dtype]


def _leaves(tree, prefix: str = ""):
    """(flat name, leaf) pairs in tree order; None entries (parameterless modules) skipped."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _leaves(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from _leaves(v, f"{prefix}.{i}" if prefix else str(i))
    elif tree is not None:
        yield prefix, tree


def _rebuild(tree, fn: Callable, prefix: str = ""):
    if isinstance(tree, dict):
        return {k: _rebuild(v, fn, f"{prefix}.{k}" if prefix else str(k)) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [_rebuild(v, fn, f"{prefix}.{i}" if prefix else str(i)) for i, v in enumerate(tree)]
    return None if tree is None else fn(prefix, tree)


def _check_uniform(key: str, layers: list) -> None:
    if not layers or any(layer is None for layer in layers):
        raise ValueError(
            f"params[{key!r}] must be a non-empty list of per-layer param trees to stack for the layer scan"
        )
    shapes = [[(n, host_array(v).shape) for n, v in _leaves(layer)] for layer in layers]
    for i, layer_shapes in enumerate(shapes[1:], start=1):
        if layer_shapes != shapes[0]:
            raise ValueError(
                f"params[{key!r}][{i}] differs from layer 0 in names or shapes, so the layers cannot be "
                "stacked for one scan; check that the checkpoint holds one uniform run of blocks"
            )


def _shared_stack(leaves: list):
    """The torch (L, ...) buffer these per-layer tensors are the consecutive slices of (what the
    stacked loader hands out), or None when they are separate tensors."""
    base = getattr(leaves[0], "_base", None)
    if base is None or not base.is_contiguous() or tuple(base.shape) != (len(leaves), *leaves[0].shape):
        return None
    for i, leaf in enumerate(leaves):
        if getattr(leaf, "_base", None) is not base or leaf.data_ptr() != base[i].data_ptr():
            return None
    return base


def _get(tree, dotted: str):
    for part in dotted.split("."):
        tree = tree[int(part)] if isinstance(tree, (list, tuple)) else tree[part]
    return tree


def _convert(tree, dtype: str | None, keep_fp32, scanned: Sequence[str], sink: Callable):
    """Walk `tree` leaf by leaf: stack scanned runs and cast (one host copy, or none when the
    source already has the target dtype), then hand each finished host array to
    `sink(name, array, stacked)` and keep what it returns. Going leaf by leaf lets `place`
    upload and drop each host buffer before making the next."""

    def cast(name, leaf):
        a = host_array(leaf)
        return sink(name, a.astype(_target(name, a, dtype, keep_fp32), copy=False), False)

    out = {}
    for key, value in tree.items():
        if key not in scanned or not isinstance(value, (list, tuple)):
            out[key] = _rebuild(value, cast, key)
            continue
        layers = list(value)
        _check_uniform(key, layers)

        def stacked(name: str, first, key=key, layers=layers):
            first = host_array(first)
            target = _target(f"{key}.0.{name}", first, dtype, keep_fp32)
            base = _shared_stack([_get(layer, name) for layer in layers])
            if base is not None and host_array(base).dtype == target:
                # The loader already wrote the layers into one (L, ...) buffer in this dtype
                # (weights/stacked.py): hand that buffer over as it is, no host copy at all.
                return sink(f"{key}.{name}", host_array(base), True)
            buf = np.empty((len(layers),) + first.shape, target)
            for i, layer in enumerate(layers):
                buf[i] = host_array(_get(layer, name))  # the cast happens in this one copy
            return sink(f"{key}.{name}", buf, True)

        out[key] = _rebuild(layers[0], stacked)
    return out


def to_host(
    tree,
    dtype: str | None = "float32",
    keep_fp32: Callable[[str], bool] | None = None,
    scanned: Sequence[str] = SCANNED,
):
    """The host-side tree `place` uploads: scanned layer runs stacked, dtypes applied
    (dtype None keeps each leaf's own)."""
    return _convert(tree, dtype, keep_fp32, scanned, lambda name, array, stacked: array)


def stack_layers(tree, scanned: Sequence[str] = SCANNED):
    """Only the stacking of `to_host`: dtypes as the source has them."""
    return to_host(tree, None, None, scanned)


# ---------------------------------------------------------------- device side
def fsdp_spec(shape: tuple, mesh: Mesh, axes: Sequence[str], stacked: bool, min_size: int = FSDP_MIN_SIZE) -> P:
    """Shard the largest axis divisible by the size of `axes` (skipping a stacked layer axis);
    replicate small leaves and leaves with no such axis."""
    size = math.prod(mesh.shape[a] for a in axes)
    if size == 1 or math.prod(shape) < min_size:
        return P()
    candidates = [d for d in range(1 if stacked else 0, len(shape)) if shape[d] % size == 0]
    if not candidates:
        return P()
    d = max(candidates, key=lambda i: (shape[i], -i))
    spec = [None] * len(shape)
    spec[d] = tuple(axes) if len(axes) > 1 else axes[0]
    return P(*spec)


def place(
    tree,
    mesh: Mesh,
    dtype: str = "float32",
    keep_fp32: Callable[[str], bool] | None = None,
    fsdp_axes: Sequence[str] | None = None,
    fsdp_min_size: int = FSDP_MIN_SIZE,
    scanned: Sequence[str] = SCANNED,
):
    """Host param tree → JAX arrays on `mesh` (see the module docstring). Returns the tree;
    `param_specs(tree)` gives the PartitionSpecs to hand to `shard_map`."""
    axes = tuple(fsdp_axes or ())
    for a in axes:
        if a not in mesh.shape:
            raise ValueError(f"fsdp axis {a!r} is not a mesh axis; use some of {', '.join(mesh.axis_names)}")

    def put(name: str, array: np.ndarray, stacked: bool):
        spec = fsdp_spec(array.shape, mesh, axes, stacked, fsdp_min_size) if axes else P()
        return jax.device_put(array, NamedSharding(mesh, spec))

    return _convert(tree, dtype, keep_fp32, scanned, put)


def param_specs(tree):
    """The PartitionSpec of every placed leaf (None where the tree has None)."""
    return _rebuild(tree, lambda _, x: x.sharding.spec)


def _gather(x, spec: P, skip: int = 0):
    for d, axes in enumerate(spec):
        if axes is not None:
            x = lax.all_gather(x, axes, axis=d - skip, tiled=True)
    return x


def all_gather_params(params, specs, scanned: Sequence[str] = SCANNED):
    """Inside `shard_map`: (params with every non-scanned leaf whole, gather_layer), where
    `gather_layer(layer)` makes one layer's slice of a scanned run whole (its specs lose the
    leading layer axis). Pass gather_layer as `ops.scan_layers(…, gather=gather_layer)` so the
    scan gathers one layer at a time."""
    whole = {}
    for key, value in params.items():
        if key in scanned:
            whole[key] = value
        else:
            whole[key] = jax.tree.map(_gather, value, specs[key])
    layer_specs = [specs[key] for key in scanned if key in specs]

    def gather_layer(layer):
        for spec_tree in layer_specs:
            if jax.tree.structure(spec_tree) == jax.tree.structure(layer):
                return jax.tree.map(lambda x, s: _gather(x, s, skip=1), layer, spec_tree)
        raise ValueError(
            "ops.scan_layers got a layer tree that matches no scanned param run; "
            "gather_layer only knows the runs named in placement.SCANNED"
        )

    return whole, gather_layer
