"""Ulysses × ring attention on a ("dp", "ring", "ulysses") mesh of 8 virtual CPU devices
equals one-device attention, and so does the whole DiT forward run on token shards.

Every parallel path is compared with the unsharded computation (the sharded result's padded
rows are dropped first). fp32; the sharded runs change only the order of the softmax sums
(log-sum-exp merges per ring block): measured ≤ 4e-7, so the project's fp32 bound of 1e-5
leaves margin while any misrouted block, wrong offset or unmasked padding key is ≥ 1e-2.
Padding keys are filled with huge values, so masking them anything but exactly would show.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from harness.jax_devices import rel_err, require_eight_devices
from jax.sharding import PartitionSpec as P

from parallel_wan.backends.jax import attention as local, ops as jops, placement, sequence_parallel as sp
from parallel_wan.models import transformer as dit
from parallel_wan.models.rope import rope_tables
from parallel_wan.models.transformer_config import TransformerConfig
from parallel_wan.weights.tree import unflatten

RTOL = 1e-5  # see the module docstring

require_eight_devices()


def mesh_of(dp, ring, ulysses):
    return sp.build_mesh(dp, ring, ulysses, devices=jax.devices()[: dp * ring * ulysses])


# ---------------------------------------------------------------- attention alone
def sharded_attention(mesh, q, k, v, valid, kernel="auto"):
    attend = sp.sequence_parallel_attention(mesh, valid, kernel=kernel)
    spec = P("dp", sp.CP)
    mapped = jax.shard_map(attend, mesh=mesh, in_specs=(spec,) * 3, out_specs=spec, check_vma=sp.check_vma(kernel))
    return np.asarray(jax.jit(mapped)(q, k, v))


def qkv(batch, valid, padded, heads=8, head_dim=16, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((batch, padded, heads, head_dim)).astype(np.float32) for _ in range(3))
    k[:, valid:], v[:, valid:] = 1e3, 1e3  # padding: would dominate any softmax it leaked into
    return q, k, v


@pytest.mark.parametrize(
    "dp,ring,ulysses,valid,local_len",
    [
        (2, 2, 2, 64, 16),  # the 2D ring: dp2 × cp4
        (1, 8, 1, 64, 8),  # ring only
        (1, 1, 8, 64, 8),  # Ulysses only, heads = ulysses = 8
        (2, 1, 4, 64, 16),  # Ulysses 4 with dp
        (2, 2, 1, 61, 31),  # padded, cp2 on the ring (61 → 62)
        (2, 1, 2, 61, 31),  # padded, cp2 on Ulysses
        (2, 2, 2, 37, 10),  # padded 2D ring (37 → 40)
        (1, 8, 1, 20, 4),  # extra padding: ring blocks 5..7 hold no valid key at all
    ],
)
def test_attention_equals_one_device(dp, ring, ulysses, valid, local_len):
    cp = ring * ulysses
    q, k, v = qkv(2, valid, cp * local_len)
    out = sharded_attention(mesh_of(dp, ring, ulysses), q, k, v, valid)
    ref = np.asarray(local.attention(*(jnp.asarray(x[:, :valid]) for x in (q, k, v))))
    assert np.isfinite(out).all()  # padded queries too: they are dropped, but must not be NaN
    assert rel_err(out[:, :valid], ref) <= RTOL


def test_splash_kernel_path_in_interpret_mode():
    """The TPU kernel (Pallas splash attention, run by the Pallas interpreter off TPU) behind
    the same function, on a padded 2D ring: ring blocks use its log-sum-exp, Ulysses-only
    meshes its plain output."""
    q, k, v = qkv(2, 37, 40)
    ref = np.asarray(local.attention(*(jnp.asarray(x[:, :37]) for x in (q, k, v))))
    for dp, ring, ulysses in ((2, 2, 2), (1, 1, 4)):
        out = sharded_attention(mesh_of(dp, ring, ulysses), q, k, v, 37, kernel="splash")
        assert rel_err(out[:, :37], ref) <= RTOL


def test_bad_meshes_say_what_to_do():
    with pytest.raises(ValueError, match="does not divide them; choose ulysses among the divisors of 6"):
        sharded_attention(mesh_of(1, 1, 4), *qkv(1, 16, 16, heads=6), 16)
    with pytest.raises(ValueError, match="needs 4 devices but 8 are available"):
        sp.build_mesh(2, 2, 1)


# ---------------------------------------------------------------- the whole DiT on token shards
@pytest.fixture(scope="module")
def tiny_dit():
    from diffusers import WanTransformer3DModel

    torch.manual_seed(0)
    model = WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=8,
        attention_head_dim=8,
        in_channels=48,
        out_channels=48,
        text_dim=32,
        freq_dim=32,
        ffn_dim=96,
        num_layers=2,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        eps=1e-6,
        rope_max_seq_len=1024,
    ).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    return TransformerConfig.from_diffusers(dict(model.config)), unflatten(model.state_dict())


def forward_fn(cfg):
    return lambda p, x, t, c, rope, attn, run_blocks: dit.forward(p, x, t, c, rope, cfg, jops, attn, run_blocks)


@pytest.mark.parametrize(
    "dp,ring,ulysses,per_token,fsdp",
    [
        (2, 2, 2, False, False),  # 2D ring, 45 tokens padded to 48
        (1, 8, 1, True, False),  # ring 8, per-token timesteps (TI2V) padded with the sequence
        (2, 1, 4, False, False),  # Ulysses 4
        (2, 2, 2, True, True),  # FSDP: weights sharded over all 8 devices, gathered per layer
    ],
)
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_transformer_on_token_shards_equals_one_device(tiny_dit, dp, ring, ulysses, per_token, fsdp):
    cfg, params = tiny_dit
    mesh = mesh_of(dp, ring, ulysses)
    rng = np.random.default_rng(1)
    latents = rng.standard_normal((2, 48, 3, 6, 10)).astype(np.float32)
    grid = dit.patch_grid(cfg, latents.shape)
    tokens = np.asarray(dit.patchify(jnp.asarray(latents), cfg.patch_size, jops))
    n = tokens.shape[1]  # 3 × 3 × 5 = 45: no cp of 4 or 8 divides it
    context = rng.standard_normal((2, 512, 32)).astype(np.float32)
    if per_token:
        timestep = np.full((2, n), 937.0, np.float32)
        timestep[:, :15] = 0.0  # the first latent frame is the clean image
    else:
        timestep = np.array([937.0, 421.0], np.float32)

    one = placement.place(params, mesh_of(1, 1, 1), "float32")
    cos, sin = rope_tables(cfg.attention_head_dim, grid)
    reference = jax.jit(lambda p, x, t, c, cs, sn: dit.forward(p, x, t, c, (cs, sn), cfg, jops, jops.attention))
    ref = np.asarray(reference(one, tokens, timestep, context, cos, sin))

    cp = ring * ulysses
    padded = cp * sp.local_tokens(n, cp)
    pad = [(0, 0), (0, padded - n), (0, 0)]
    cos_p, sin_p = rope_tables(cfg.attention_head_dim, grid, token_index=np.arange(padded))
    timestep_p = np.pad(timestep, pad[:2]) if per_token else timestep
    if fsdp:
        placed = placement.place(params, mesh, "float32", fsdp_axes=sp.AXES, fsdp_min_size=1024)
        specs = placement.param_specs(placed)
        assert specs["blocks"]["attn1"]["to_q"]["weight"] != P()  # really sharded at rest
    else:
        placed, specs = placement.place(params, mesh, "float32"), None
    step = sp.shard_forward(forward_fn(cfg), mesh, n, per_token_timestep=per_token, param_specs=specs)
    out = step(placed, np.pad(tokens, pad), timestep_p, context, cos_p, sin_p)
    assert out.sharding.is_equivalent_to(sp.token_sharding(mesh), 3)  # stays on the shards
    assert rel_err(np.asarray(out)[:, :n], ref) <= RTOL
