"""A step cache at the JAX block seam: the `run_blocks` handed to `models.transformer.forward`
inside `shard_forward`'s `shard_map`, for MagCache (reuse the cached residual of the whole
stack, or run it and keep its residual) and First-Block Cache (run block 0, decide, then run
or skip blocks 1…n−1).

Everything the step decides is data: the step's plan row (caching/decisions.py's numbers) comes in
as traced scalars and the choice is a `lax.cond`, so one compiled program serves every step.
The cache arrays are this device's (rows, Lc, dim) shards, in and out of the map like the
tokens.

First-Block Cache decides per CFG branch from sums over *all* the branch's rows and valid
tokens: each device scatters its rows' sums into the global row slots, one `psum` over every
mesh axis adds them, and every device derives the same per-branch decision from the same
numbers (the peers' hang: ranks deciding on their own shards). Every device then runs blocks
1…n−1 when any branch computes, and rows whose branch skips take their cached result
(caching/first_block.py's rule) — so the video is per-branch skipping's. Under CFG parallel the
dp group of a skipping branch still runs the blocks (the record's `block_forwards_discarded`):
one program's collectives must be entered by all of its devices — XLA's CPU collectives
rendezvous over every device of the program even for a ring or Ulysses group (a dp group
skipping alone hangs there, measured), and FSDP's per-layer all-gather spans every mesh axis.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P

from ...caching.decisions import ACTIONS, REUSE
from . import ops
from .sequence_parallel import AXES, CP


@dataclass(frozen=True)
class CacheSpec:
    """What a cached step's trace depends on (hashable: part of the program's key)."""

    kind: str  # magcache | taylorseer | fbcache
    threshold: float  # fbcache: the relative L1 change at or below which a branch skips
    order: int  # taylorseer: highest Taylor order (factors f0 … f{order})
    calibrate: bool  # magcache: run dense and measure per-branch ratio means
    batch: int  # forward rows per CFG branch
    branches: int  # 1 (no guidance) or 2 ([cond…, uncond…])
    valid_tokens: int  # tokens before the end padding

    def state_names(self) -> list[str]:
        if self.kind == "magcache":
            return ["residual"]
        if self.kind == "fbcache":
            return ["fb_reference", "fb_tail"]
        return [f"taylor_f{k}" for k in range(self.order + 1)]


ROW_KEYS = ("action", "fresh", "first")  # the plan row's scalars the block seam reads


class BlockCache:
    """The `block_seam` of `shard_forward`: extra inputs (the step's row, the cache arrays)
    and outputs (the new arrays and the step's decisions) of the mapped forward."""

    def __init__(self, spec: CacheSpec):
        self.spec = spec
        state = {name: P("dp", CP, None) for name in spec.state_names()}
        self.in_specs = ({k: P() for k in ROW_KEYS}, state)
        self.out_specs = (state, {"skipped": P(), **({"calibration": P()} if spec.calibrate else {})})

    def bind(self, gather, inputs):
        """(run_blocks, results): `results()` gives the outputs once the forward has traced
        `run_blocks` (it is called exactly once per forward)."""
        row, state = inputs
        box: dict = {}

        def run_blocks(block, x, blocks):
            fn = _first_block if self.spec.kind == "fbcache" else _magcache
            out, box["out"] = fn(self.spec, row, state, gather, block, x, blocks)
            return out

        return run_blocks, lambda: box["out"]


# ---------------------------------------------------------------- per-branch sums over the mesh
def _valid(lc: int, valid_tokens: int):
    """(1, Lc, 1) float32: 1 on this device's tokens before the end padding."""
    position = lax.axis_index(CP) * lc + jnp.arange(lc)
    return (position < valid_tokens).astype(jnp.float32)[None, :, None]


def _branch_totals(per_row, spec: CacheSpec):
    """This device's (rows, k) sums → (branches, k) totals over every device: each device
    writes its rows into their global slots (rows are split over dp) and one psum adds the
    token shards and the dp groups, so every device holds the same numbers."""
    local = per_row.shape[0]
    slots = jnp.zeros((spec.branches * spec.batch,) + per_row.shape[1:], per_row.dtype)
    slots = lax.dynamic_update_slice_in_dim(slots, per_row, lax.axis_index("dp") * local, axis=0)
    slots = lax.psum(slots, AXES)
    return jnp.sum(jnp.reshape(slots, (spec.branches, spec.batch) + per_row.shape[1:]), axis=1)


def _my_branches(values, local: int, spec: CacheSpec):
    """Per-branch values → one per row of this device ([cond…, uncond…], `batch` rows each)."""
    rows = lax.axis_index("dp") * local + jnp.arange(local)
    return values[rows // spec.batch]


def _all(value, branches: int):
    return jnp.full((branches,), value, jnp.int8)


# ---------------------------------------------------------------- MagCache
def _magcache(spec: CacheSpec, row, state, gather, block, x, blocks):
    """Reuse: x + the cached residual; compute: the whole stack, its residual kept."""

    def compute(x):
        out = ops.scan_layers(block, x, blocks, gather=gather)
        return out, out - x

    def reuse(x):
        return x + state["residual"], state["residual"]

    reusing = row["action"] == ACTIONS.index(REUSE)
    out, residual = lax.cond(reusing, reuse, compute, x)
    decisions = {"skipped": _all(reusing, spec.branches)}
    if spec.calibrate:
        decisions["calibration"] = _calibration(spec, row, residual, state["residual"], x.shape[1])
    return out, ({"residual": residual}, decisions)


def _calibration(spec: CacheSpec, row, residual, previous, lc: int):
    """Per branch, the mean over its rows and valid tokens of ‖r‖ / ‖r_prev‖ (norm over the
    hidden dimension): caching/magcache_calibration.py's measure; NaN on the first step."""
    r, prev = residual.astype(jnp.float32), previous.astype(jnp.float32)
    ratio = jnp.sqrt(jnp.sum(r * r, axis=-1, keepdims=True)) / jnp.sqrt(jnp.sum(prev * prev, axis=-1, keepdims=True))
    ratio = jnp.where(_valid(lc, spec.valid_tokens) > 0, ratio, 0.0)  # padded tokens: 0/0 must not count
    sums = _branch_totals(jnp.sum(ratio, axis=(1, 2))[:, None], spec)[:, 0]
    return jnp.where(row["first"] > 0, jnp.nan, sums / (spec.valid_tokens * spec.batch))


# ---------------------------------------------------------------- First-Block Cache
def _layer(blocks, i, gather):
    """Layer i of the stacked params, indexed in place (a dynamic slice: a static [1:] of the
    stack could be materialised as a copy of every weight)."""
    layer = jax.tree.map(lambda a: lax.dynamic_index_in_dim(a, i, 0, keepdims=False), blocks)
    return layer if gather is None else gather(layer)


def _first_block(spec: CacheSpec, row, state, gather, block, x, blocks):
    ref, tail = state["fb_reference"], state["fb_tail"]
    h0 = block(x, _layer(blocks, 0, gather))
    residual = h0 - x
    r, r_ref = residual.astype(jnp.float32), ref.astype(jnp.float32)
    valid = _valid(x.shape[1], spec.valid_tokens)
    per_row = jnp.stack(
        [jnp.sum(jnp.abs(r - r_ref) * valid, axis=(1, 2)), jnp.sum(jnp.abs(r_ref) * valid, axis=(1, 2))], axis=-1
    )
    change, scale = _branch_totals(per_row, spec).T
    # diffusers: compute when the change is above the threshold; an expert's first step, or a
    # reference that is all zeros, computes.
    computes = (row["fresh"] > 0) | (scale == 0) | ~(change / scale <= spec.threshold)
    mine = _my_branches(computes, x.shape[0], spec)

    def rest(h):
        return lax.fori_loop(1, ops.num_layers(blocks), lambda i, h: block(h, _layer(blocks, i, gather)), h)

    out = lax.cond(jnp.any(computes), rest, lambda h: h + tail, h0)
    keep = mine[:, None, None]
    state = {"fb_reference": jnp.where(keep, residual, ref), "fb_tail": jnp.where(keep, out - h0, tail)}
    return jnp.where(keep, out, h0 + tail), (state, {"skipped": (~computes).astype(jnp.int8)})
