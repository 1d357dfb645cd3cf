"""Sequence parallelism on a JAX device mesh: Ulysses × ring ("2D ring") attention under
`jax.shard_map`, and the wrapper that runs a whole transformer forward on token shards.

Mesh axes are ("dp", "ring", "ulysses"), Ulysses innermost so its all-to-all stays among
neighbouring devices (one chip's cores, one host's ICI/NVLink) and only the ring's
point-to-point sends cross further. `dp` carries batch entries (CFG halves, prompts).

Token layout (the same contract as the torch backend): the global sequence of N valid tokens
is padded at the END to cp·Lc, cp = ring × ulysses; the device with cp index
c = ring_index·ulysses + ulysses_index holds tokens [c·Lc, (c+1)·Lc). That is exactly what
`PartitionSpec(..., ("ring", "ulysses"))` places, so callers shard with `token_sharding`.

Attention on a device's (B, Lc, H, D) shard:
1. Ulysses: all-to-all over "ulysses" trades sequence for heads → (B, U·Lc, H/U, D), the
   contiguous tokens of this device's ring group [r·U·Lc, (r+1)·U·Lc), for H/U heads.
2. Ring: the K/V block travels around "ring" with `ppermute` (R-1 hops); each hop's partial
   attention is merged by log-sum-exp in float32. The next hop's send is issued before this
   hop's compute so XLA can overlap them.
3. The inverse all-to-all gives back (B, Lc, H, D).
Keys at global positions ≥ N are masked exactly (attention.py); padded queries give finite
values the caller discards.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ...parallel.shards import SequenceShards
from . import attention as local, ops, target_platform
from .placement import all_gather_params

AXES = ("dp", "ring", "ulysses")
CP = ("ring", "ulysses")  # ring-major: cp index = ring_index · ulysses + ulysses_index


# ---------------------------------------------------------------- mesh and layout
def build_mesh(dp: int = 1, ring: int = 1, ulysses: int = 1, devices=None) -> Mesh:
    """A ("dp", "ring", "ulysses") mesh over dp·ring·ulysses devices (all local ones by
    default). Axis types are Auto: code outside shard_map keeps XLA's sharding propagation."""
    devices = list(jax.devices() if devices is None else devices)
    want = dp * ring * ulysses
    if want != len(devices):
        raise ValueError(
            f"mesh dp={dp} × ring={ring} × ulysses={ulysses} needs {want} devices but {len(devices)} "
            "are available; pick a mesh whose product is the device count (CPU tests: set "
            "XLA_FLAGS=--xla_force_host_platform_device_count=N before importing jax)"
        )
    auto = (jax.sharding.AxisType.Auto,) * 3
    if len({getattr(d, "slice_index", 0) for d in devices}) > 1:
        return Mesh(multislice_grid(dp, ring, ulysses, devices), AXES, axis_types=auto)
    return jax.make_mesh((dp, ring, ulysses), AXES, axis_types=auto, devices=devices)


def multislice_grid(dp: int, ring: int, ulysses: int, devices):
    """The (dp, ring, ulysses) device grid when the devices span several slices (their
    `slice_index`, e.g. the slices of a multi-slice TPU job): dp is split across the slices,
    which talk over the data-centre network (DCN), so only the once-per-step CFG exchange and
    the final gather cross it; ring and ulysses stay inside a slice (ICI)."""
    from jax.experimental import mesh_utils

    slices = len({d.slice_index for d in devices})
    if dp % slices:
        raise ValueError(
            f"the devices span {slices} slices, so dp={dp} must be a multiple of {slices}: only dp "
            f"may cross the slow links between slices; use e.g. mesh.dp={slices} and put the rest of "
            "each slice's devices in cp (mesh.ring × mesh.ulysses)"
        )
    return mesh_utils.create_hybrid_device_mesh((dp // slices, ring, ulysses), (slices, 1, 1), devices)


def cp_size(mesh: Mesh) -> int:
    return mesh.shape["ring"] * mesh.shape["ulysses"]


def local_tokens(valid_tokens: int, cp: int) -> int:
    """Lc: tokens per cp shard, the sequence padded at the end to cp·Lc (parallel/shards.py)."""
    return SequenceShards(valid_tokens, cp).local


def token_sharding(mesh: Mesh, ndim: int = 3) -> NamedSharding:
    """(B, tokens, …) arrays: batch over dp, tokens over cp in the layout above."""
    return NamedSharding(mesh, P("dp", CP, *([None] * (ndim - 2))))


def check_heads(heads: int, mesh: Mesh) -> None:
    ulysses = mesh.shape["ulysses"]
    if heads % ulysses:
        raise ValueError(
            f"Ulysses attention splits the {heads} heads over ulysses={ulysses} devices, which "
            f"does not divide them; choose ulysses among the divisors of {heads} and put the rest "
            "of cp on the ring"
        )


# ---------------------------------------------------------------- attention
def check_vma(kernel: str = "auto") -> bool:
    """The `check_vma` to give `jax.shard_map` around this attention: on where only jnp runs
    (CPU, or kernel="jnp" with ops.attention on CPU), off where a fused kernel may run —
    Pallas splash (TPU) and cuDNN (GPU) calls declare no varying-axes type, which the check
    needs; `ops.attention` (cross and VAE attention) picks them too. The check only
    verifies collectives; turning it off changes no numbers."""
    return target_platform.current() == "cpu" and kernel != "splash"


def sequence_parallel_attention(
    mesh: Mesh, valid_tokens: int, scale: float | None = None, kernel: str = "auto"
) -> Callable:
    """Self-attention (B, Lc, H, D)³ → (B, Lc, H, D) over the whole sequence, for use inside
    a `shard_map` over `mesh` (with `check_vma=check_vma(kernel)`) with tokens laid out as the
    module docstring says; keys at global positions ≥ `valid_tokens` are masked."""
    ring, ulysses = mesh.shape["ring"], mesh.shape["ulysses"]

    def attend(q, k, v):
        check_heads(q.shape[2], mesh)
        lc = q.shape[1]
        if ulysses > 1:
            # (B, Lc, H, D) → (B, U·Lc, H/U, D): the ring group's tokens, a slice of the heads.
            q, k, v = (lax.all_to_all(x, "ulysses", split_axis=2, concat_axis=1, tiled=True) for x in (q, k, v))
        if ring == 1:
            out = local.attention(q, k, v, scale=scale, valid_keys=valid_tokens, kernel=kernel)
        else:
            out = local.rounded(_ring(q, k, v, ring, ulysses * lc, valid_tokens, scale, kernel), q.dtype)
        if ulysses > 1:
            out = lax.all_to_all(out, "ulysses", split_axis=1, concat_axis=2, tiled=True)
        return out

    return attend


def _ring(q, k, v, ring: int, block: int, valid_tokens: int, scale, kernel: str):
    """Attention of this ring member's queries against every member's K/V block; float32.
    R-1 sends: each hop's send is independent of that hop's compute, so they overlap."""
    me = lax.axis_index("ring")
    right = [(i, (i + 1) % ring) for i in range(ring)]

    def send(x):
        return lax.ppermute(x, "ring", right)

    def partial(k_blk, v_blk, hop):
        source = (me - hop) % ring  # after `hop` sends to the right, the block came from here
        return local.attention_with_lse(
            q, k_blk, v_blk, scale=scale, valid_keys=valid_tokens, key_offset=source * block, kernel=kernel
        )

    def hop(i, carry):
        k_blk, v_blk, out, lse = carry
        k_next, v_next = send(k_blk), send(v_blk)
        out, lse = local.merge(out, lse, *partial(k_blk, v_blk, i))
        return k_next, v_next, out, lse

    out, lse = partial(k, v, 0)
    carry = (send(k), send(v), out, lse)
    if ring > 2:
        carry = lax.fori_loop(1, ring - 1, hop, carry)
    k_last, v_last, out, lse = carry
    out, _ = local.merge(out, lse, *partial(k_last, v_last, ring - 1))
    return out


# ---------------------------------------------------------------- a whole forward on shards
def shard_forward(
    forward: Callable,
    mesh: Mesh,
    valid_tokens: int,
    *,
    per_token_timestep: bool = False,
    shared_timestep: bool = False,
    param_specs=None,
    kernel: str = "auto",
    block_seam=None,
    extra_specs: tuple = (),
) -> Callable:
    """Wrap `forward(params, tokens, timestep, context, rope, attention, run_blocks) → tokens`
    (e.g. `lambda p, x, t, c, rope, attn, run: transformer.forward(p, x, t, c, rope, cfg, ops,
    attn, run)`) to run on token shards. The result `f(params, tokens, timestep, context, cos, sin)` is
    jitted and takes global arrays:

      tokens (B, cp·Lc, C) padded at the end; timestep (B,) or per-token (B, cp·Lc) — with
      `shared_timestep`, one row that every row uses, (1,) or (1, cp·Lc), on every device of
      dp; context (B, text_len, text_dim); cos, sin (cp·Lc, head_dim/2) for the global positions.

    It returns (B, cp·Lc, C_out) sharded like the tokens. Params are replicated, or, with
    `param_specs` (placement.param_specs of FSDP-placed params), sharded at rest: the
    non-layer params are gathered on entry and each layer's inside the layer scan: the block
    runner handed to `forward` is then `ops.scan_layers` with the layer gather bound (None,
    the forward's default, otherwise).

    `block_seam` (a step cache, cached_blocks.BlockCache) takes over the block runner: the
    result then takes one more argument, the seam's inputs (`block_seam.in_specs`), and returns
    (tokens, the seam's outputs) (`block_seam.out_specs`).

    `extra_specs`: the PartitionSpecs of more inputs the forward takes after the block runner
    (Animate's per-token pose and frame index, its image and face tokens); the result takes them
    after `sin`.
    """
    rows = None if shared_timestep else "dp"
    in_specs = (
        P() if param_specs is None else param_specs,
        P("dp", CP, None),
        P(rows, CP) if per_token_timestep else P(rows),
        P("dp", None, None),
        P(CP, None),
        P(CP, None),
    )
    out_specs = P("dp", CP, None)
    in_specs = in_specs + tuple(extra_specs)
    if block_seam is not None:
        in_specs, out_specs = in_specs + (block_seam.in_specs,), (out_specs, block_seam.out_specs)
    attend = sequence_parallel_attention(mesh, valid_tokens, kernel=kernel)
    extras = len(extra_specs)

    def on_shard(params, tokens, timestep, context, cos, sin, *rest):
        run_blocks = gather_layer = None  # None: the forward's default, its ops' scan over resident layers
        if param_specs is not None:
            params, gather_layer = all_gather_params(params, param_specs)
            run_blocks = functools.partial(ops.scan_layers, gather=gather_layer)
        extra, seam_inputs = rest[:extras], rest[extras:]
        if block_seam is None:
            return forward(params, tokens, timestep, context, (cos, sin), attend, run_blocks, *extra)
        run_blocks, results = block_seam.bind(gather_layer, *seam_inputs)
        return forward(params, tokens, timestep, context, (cos, sin), attend, run_blocks), results()

    mapped = jax.jit(
        jax.shard_map(on_shard, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=check_vma(kernel))
    )
    dp, cp = mesh.shape["dp"], cp_size(mesh)

    def step(params, tokens, timestep, context, cos, sin, *rest):
        batch, length = tokens.shape[0], tokens.shape[1]
        if batch % dp:
            raise ValueError(
                f"the batch of {batch} does not split over dp={dp}; with CFG the batch is 2 (cond, "
                "uncond) per prompt, so use dp=1 or dp=2, or more prompts"
            )
        if length % cp or length < valid_tokens:
            raise ValueError(
                f"tokens must be the {valid_tokens} valid tokens padded at the end to a multiple of "
                f"cp={cp} (e.g. {cp * local_tokens(valid_tokens, cp)}), got {length}"
            )
        return mapped(params, tokens, timestep, context, cos, sin, *rest)

    step.lower = mapped.lower  # for inspecting or AOT-compiling the program
    return step
