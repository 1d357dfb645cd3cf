"""S2V-14B's model layer (models/s2v_transformer.py, s2v_tokens.py, s2v_shapes.py) against the
official `WanModel_S2V` of the installed `wan22` package (tests/harness/official_s2v.py) on a
tiny random model: the parameter table, the token positions and the whole forward, with and
without the motion frames.

Tolerance: both run float32 on the CPU; the official code rotates q and k in float64 and computes
the sinusoidal timestep features in float64, ours in float32, so outputs differ by float32
rounding through three blocks, amplified by random weights: 3e-5 relative (measured 7e-6)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from harness.official_s2v import official_s2v

from parallel_wan.backends.torch import ops as tops
from parallel_wan.backends.torch.runners.block_pass import ResidentRunner
from parallel_wan.models import s2v_tokens, transformer as dit
from parallel_wan.models.animate_face import face_runs
from parallel_wan.models.rope import rope_at
from parallel_wan.models.s2v_transformer import SegmentArrays, cond_and_uncond, forward
from parallel_wan.models.transformer_config import TransformerConfig
from parallel_wan.models.transformer_shapes import param_shapes
from parallel_wan.weights.transformer_keymap import official_to_diffusers
from parallel_wan.weights.tree import unflatten

RTOL = 3e-5
TINY = dict(
    model_type="s2v",
    patch_size=(1, 2, 2),
    in_dim=16,
    dim=32,
    ffn_dim=64,
    freq_dim=32,
    text_dim=16,
    out_dim=16,
    num_heads=2,
    num_layers=3,
    cond_dim=16,
    audio_dim=24,
    num_audio_token=4,
    enable_adain=True,
    adain_mode="attn_norm",
    audio_inject_layers=[0, 2],
    zero_init=False,
    zero_timestep=True,
    enable_motioner=False,
    add_last_motion=True,
    enable_tsm=False,
    trainable_token_pos_emb=False,
    enable_framepack=True,
    framepack_drop_mode="padd",
    motion_frames=73,
)


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def official(model, x, t, text, ref, mot, pose, audio, motion: bool):
    """The official WanModel_S2V's prediction (C, T, H, W) for numpy inputs: one video, its
    text's tokens unpadded, the motion frames dropped unless `motion`."""
    with torch.no_grad():
        return model(
            [torch.from_numpy(x)],
            t=torch.from_numpy(t),
            context=[torch.from_numpy(text)],
            seq_len=None,
            ref_latents=torch.from_numpy(ref),
            motion_latents=torch.from_numpy(mot),
            cond_states=torch.from_numpy(pose),
            audio_input=torch.from_numpy(audio),
            motion_frames=[73, 19],
            drop_motion_frames=not motion,
        )[0].numpy()


@pytest.fixture(scope="module")
def official_model():
    _, model, _ = official_s2v()
    torch.manual_seed(5)
    m = model.WanModel_S2V(**TINY)
    with torch.no_grad():
        for p in m.parameters():  # every parameter random: no path trivially zero
            p.copy_(torch.randn_like(p) * 0.3)
    return m.eval()


def test_parameter_table_equals_the_official_model(official_model):
    cfg = TransformerConfig.from_official(TINY)
    ours = param_shapes(cfg)
    theirs = {k: tuple(v.shape) for k, v in official_to_diffusers(official_model.state_dict()).items()}
    assert ours == theirs


def test_refuses_variants_it_does_not_implement():
    with pytest.raises(ValueError, match="enable_motioner"):
        TransformerConfig.from_official({**TINY, "enable_motioner": True, "enable_framepack": False})
    with pytest.raises(ValueError, match="audio_inject_layers"):
        TransformerConfig.from_official({**TINY, "audio_inject_layers": [0, 3]})


@pytest.mark.parametrize("motion", [True, False], ids=["motion_frames", "first_clip"])
def test_the_s2v_dit_equals_the_official_model(official_model, motion):
    rng = np.random.default_rng(11)
    frames, lh, lw = 3, 8, 8  # 3 latent frames of 8 × 8 (a 4 × 4 token grid; the packer's coarsest group needs 8)
    x = rng.standard_normal((16, frames, lh, lw)).astype(np.float32)
    ref = rng.standard_normal((1, 16, 1, lh, lw)).astype(np.float32)
    mot = rng.standard_normal((1, 16, 19, lh, lw)).astype(np.float32)
    pose = rng.standard_normal((1, 16, frames, lh, lw)).astype(np.float32)
    text = np.zeros((512, 16), np.float32)
    text[:7] = rng.standard_normal((7, 16))
    audio = rng.standard_normal((1, 25, 24, 12)).astype(np.float32)  # 12 video frames → 3 latent frames
    t = np.array([700.0], np.float32)
    want = official(official_model, x, t, text[:7], ref, mot, pose, audio, motion)

    cfg = TransformerConfig.from_official(TINY)
    ops = tops
    params = unflatten(official_to_diffusers(official_model.state_dict()))
    grid = (frames, lh // 2, lw // 2)
    patch = cfg.patch_size
    arrays = SegmentArrays(
        pose_tokens=dit.patchify(torch.from_numpy(pose), patch, ops),
        reference_tokens=dit.patchify(torch.from_numpy(ref), patch, ops),
        motion_latents=torch.from_numpy(mot) if motion else None,
        audio=torch.from_numpy(audio),
    )
    with torch.no_grad():
        inputs, _ = cond_and_uncond(params, arrays, cfg, ops, guided=False)
        positions = np.concatenate(
            [s2v_tokens.video_positions(grid), s2v_tokens.extra_positions(grid[1], grid[2], motion)]
        )
        assert inputs.extra.shape[1] == len(positions) - np.prod(grid)
        cos, sin = rope_at(cfg.attention_head_dim, positions)
        runs = face_runs(np.arange(np.prod(grid)), grid[1] * grid[2], grid[0])
        tokens = dit.patchify(torch.from_numpy(x[None]), patch, ops)
        video = tokens.shape[1]  # the sequence goes on: placeholders where the extra tokens sit
        tokens = torch.cat([tokens, torch.zeros(1, inputs.extra.shape[1], tokens.shape[2])], dim=1)
        out = forward(
            params,
            tokens,
            torch.from_numpy(t),
            torch.from_numpy(text[None]),
            inputs,
            (torch.from_numpy(cos), torch.from_numpy(sin)),
            cfg,
            ops,
            ops.attention,
            ResidentRunner(),
            runs,
        )
    assert not out[:, video:].any()  # nothing predicted for the extra tokens
    got = dit.unpatchify(out[:, :video], grid, patch, ops)[0].numpy()
    assert got.shape == want.shape and rel_err(got, want) <= RTOL, rel_err(got, want)


def test_the_14b_parameter_table_equals_the_official_model_built_on_meta():
    """S2V-14B's whole table (4096-wide text, 40 blocks, 12 injectors) against the official
    class built on the meta device from the config our registry writes for it."""
    from parallel_wan.models.registry import architecture

    _, model, _ = official_s2v()
    cfg = architecture("wan2.2_s2v_14b").transformer
    official = {k: v for k, v in cfg.to_official("s2v").items() if not k.startswith("_")}
    with torch.device("meta"):
        net = model.WanModel_S2V(**official)
    theirs = {k: tuple(v.shape) for k, v in official_to_diffusers(dict(net.named_parameters())).items()}
    assert param_shapes(cfg) == theirs
    assert TransformerConfig.from_official(official) == cfg  # the config reads back as written
    assert sum(np.prod(s) for s in theirs.values()) > 16e9  # S2V-14B is ~16.3B parameters with its additions


# JAX's eager dispatch of the layer scan: over 5 s in the suite's run (tests/README.md)
@pytest.mark.parametrize("backend", ["torch", pytest.param("jax", marks=pytest.mark.slow)])
def test_the_masked_forward_equals_the_official_model(official_model, backend):
    """forward_masked — what a JAX shard runs, its video/extra split a per-token mask, its layers
    one scan with the injectors picked by one-hot — against the official model, on the torch and
    the JAX ops (the motion frames on)."""
    import jax.numpy as jnp

    from parallel_wan.backends.jax import ops as jops
    from parallel_wan.models.s2v_transformer import MaskedInputs, aligned, forward_masked

    rng = np.random.default_rng(12)
    frames, lh, lw = 3, 8, 8
    x = rng.standard_normal((16, frames, lh, lw)).astype(np.float32)
    ref = rng.standard_normal((1, 16, 1, lh, lw)).astype(np.float32)
    mot = rng.standard_normal((1, 16, 19, lh, lw)).astype(np.float32)
    pose = rng.standard_normal((1, 16, frames, lh, lw)).astype(np.float32)
    text = np.zeros((512, 16), np.float32)
    text[:5] = rng.standard_normal((5, 16))
    audio = rng.standard_normal((1, 25, 24, 12)).astype(np.float32)
    t = np.array([400.0], np.float32)
    want = official(official_model, x, t, text[:5], ref, mot, pose, audio, motion=True)

    cfg = TransformerConfig.from_official(TINY)
    ops = tops if backend == "torch" else jops
    put = (lambda a: torch.from_numpy(np.asarray(a))) if backend == "torch" else jnp.asarray
    state = official_to_diffusers(official_model.state_dict())
    params = unflatten({k: (v if backend == "torch" else jnp.asarray(v.numpy())) for k, v in state.items()})
    grid, patch = (frames, lh // 2, lw // 2), cfg.patch_size
    video = int(np.prod(grid))
    arrays = SegmentArrays(
        pose_tokens=dit.patchify(put(pose), patch, ops),
        reference_tokens=dit.patchify(put(ref), patch, ops),
        motion_latents=put(mot),
        audio=put(audio),
    )
    with torch.no_grad():
        inputs, _ = cond_and_uncond(params, arrays, cfg, ops, guided=False)
        total = video + inputs.extra.shape[1]
        pose_al, extra_al = aligned(inputs, video, total, ops)
        index = np.arange(total)
        frames_of = np.where(index < video, np.minimum(index // (grid[1] * grid[2]), frames - 1), 0).astype(np.int32)
        masked = MaskedInputs(pose_al, extra_al, inputs.audio, inputs.audio_global, put(index < video), put(frames_of))
        positions = np.concatenate(
            [s2v_tokens.video_positions(grid), s2v_tokens.extra_positions(grid[1], grid[2], True)]
        )
        cos, sin = rope_at(cfg.attention_head_dim, positions)
        tokens = dit.patchify(put(x[None]), patch, ops)
        tokens = ops.concat([tokens, ops.zeros((1, total - video, tokens.shape[2]), "float32", like=tokens)], axis=1)
        out = forward_masked(
            params, tokens, put(t), put(text[None]), masked, (put(cos), put(sin)), cfg, ops, ops.attention
        )
    out = np.asarray(ops.to_numpy(out))
    assert not out[:, video:].any()
    got = np.asarray(ops.to_numpy(dit.unpatchify(ops.asarray(out[:, :video]), grid, patch, ops)))[0]
    assert got.shape == want.shape and rel_err(got, want) <= RTOL, rel_err(got, want)
