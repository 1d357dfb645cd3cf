"""Wan2.2-Animate's model layer (models/animate_motion.py, animate_face.py, animate_transformer.py)
equals diffusers' `WanAnimateMotionEncoder`, `WanAnimateFaceEncoder`,
`WanAnimateFaceBlockCrossAttention` and the whole `WanAnimateTransformer3DModel` on the same
random weights, through the torch ops and the JAX ops.

Tolerance: fp32, relative error ≤ 1e-5 (the project's fp32 budget; the implementations differ
only in reduction order — a Conv1d as a Conv2d of height 1, XLA's vs ATen's sums —, measured
≤ 4.6e-7 on 2026-11-28 for each piece, and 2.3e-7 (torch) / 4.4e-7 (JAX) for the whole tiny DiT)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers.models.transformers.transformer_wan_animate import (
    WanAnimateFaceBlockCrossAttention,
    WanAnimateFaceEncoder,
)

from parallel_wan.backends.jax import ops as jops
from parallel_wan.backends.torch import ops as tops
from parallel_wan.models.animate_face import face_adapter, face_encoder
from parallel_wan.weights.tree import unflatten

RTOL = 1e-5
HEADS, DIM = 4, 64  # the transformer's heads and width (A14B: 40, 5120)


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def randomised(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Every parameter random (diffusers zeroes the padding tokens): no path is trivially zero."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    return module.eval()


def both_backends(fn, params: dict, *arrays):
    """fn through the torch ops and through the JAX ops, on the same weights and inputs."""
    t = fn(unflatten(dict(params)), *(torch.as_tensor(a) for a in arrays), tops)
    j = fn(unflatten({k: jnp.asarray(v.numpy()) for k, v in params.items()}), *(jnp.asarray(a) for a in arrays), jops)
    return t.numpy(), np.asarray(j)


@pytest.mark.parametrize("face_frames", [5, 9, 17])  # 4k+1 face frames → k+1 latent frames
def test_the_face_encoder_equals_diffusers(face_frames):
    reference = randomised(WanAnimateFaceEncoder(in_dim=24, out_dim=DIM, hidden_dim=32, num_heads=HEADS), 0)
    motion = np.random.default_rng(1).standard_normal((2, face_frames, 24)).astype(np.float32)
    with torch.no_grad():
        want = reference(torch.from_numpy(motion)).numpy()
    assert want.shape == (2, (face_frames - 1) // 4 + 1, HEADS + 1, DIM)
    for got in both_backends(lambda p, m, ops: face_encoder(p, m, HEADS, ops), reference.state_dict(), motion):
        assert got.shape == want.shape and rel_err(got, want) <= RTOL, rel_err(got, want)


def test_the_face_adapter_attends_each_frame_to_its_own_face_tokens():
    reference = randomised(
        WanAnimateFaceBlockCrossAttention(
            DIM, heads=HEADS, dim_head=DIM // HEADS, cross_attention_dim_head=DIM // HEADS
        ),
        2,
    )
    rng = np.random.default_rng(3)
    frames, per_frame, n = 3, 6, HEADS + 1
    x = rng.standard_normal((2, frames * per_frame, DIM)).astype(np.float32)
    face = rng.standard_normal((2, frames, n, DIM)).astype(np.float32)
    with torch.no_grad():
        want = reference(torch.from_numpy(x), torch.from_numpy(face)).numpy()
    adapter = lambda p, a, f, ops: face_adapter(p, a, f, HEADS, ops)  # noqa: E731
    for got in both_backends(adapter, reference.state_dict(), x, face):
        assert rel_err(got, want) <= RTOL, rel_err(got, want)
    # frame-local: changing frame 0's face tokens moves frame 0's tokens only
    moved = face.copy()
    moved[:, 0] += 1.0
    got, _ = both_backends(adapter, reference.state_dict(), x, moved)
    base, _ = both_backends(adapter, reference.state_dict(), x, face)
    assert not np.allclose(got[:, :per_frame], base[:, :per_frame])
    np.testing.assert_array_equal(got[:, per_frame:], base[:, per_frame:])
    with pytest.raises(ValueError, match="whole frames: 17 tokens over 3 latent frames"):
        face_adapter(
            unflatten(dict(reference.state_dict())), torch.from_numpy(x[:, :17]), torch.from_numpy(face), HEADS, tops
        )


@pytest.mark.parametrize("start, stop", [(0, 18), (4, 13), (6, 12), (13, 22)])  # 22 > 18: padding tokens
def test_a_slice_of_the_sequence_gets_its_own_tokens_of_the_whole_adapter(start, stop):
    """Sequence parallelism: a rank's tokens — partial frames at both ends, padding past the last
    frame — attend to their own frames' face tokens, as the whole sequence's do."""
    from parallel_wan.models.animate_face import face_runs

    torch.manual_seed(4)
    p = {
        "to_q": {"weight": torch.randn(DIM, DIM) * 0.1, "bias": torch.randn(DIM) * 0.1},
        "to_k": {"weight": torch.randn(DIM, DIM) * 0.1, "bias": torch.randn(DIM) * 0.1},
        "to_v": {"weight": torch.randn(DIM, DIM) * 0.1, "bias": torch.randn(DIM) * 0.1},
        "to_out": {"weight": torch.randn(DIM, DIM) * 0.1, "bias": torch.randn(DIM) * 0.1},
        "norm_q": {"weight": torch.rand(DIM // HEADS) + 0.5},
        "norm_k": {"weight": torch.rand(DIM // HEADS) + 0.5},
    }
    frames, per = 3, 6
    x = torch.randn(2, frames * per, DIM)
    face = torch.randn(2, frames, HEADS + 1, DIM)
    whole = face_adapter(p, x, face, HEADS, tops)
    index = np.arange(start, stop)
    local = torch.cat([x, torch.zeros(2, 4, DIM)], dim=1)[:, start:stop]  # zero padding past the sequence
    got = face_adapter(p, local, face, HEADS, tops, runs=face_runs(index, per, frames))
    real = index < frames * per
    torch.testing.assert_close(got[:, real], whole[:, index[real]], rtol=1e-5, atol=1e-6)
    assert torch.isfinite(got).all()
    # the same by a per-token frame index (a JAX shard's, known only when the program runs), both backends
    frames_of = np.minimum(index // per, frames - 1).astype(np.int32)
    masked = face_adapter(p, local, face, HEADS, tops, frames_of=torch.from_numpy(frames_of))
    torch.testing.assert_close(masked, got, rtol=1e-5, atol=1e-6)
    jp = {k: {n: jnp.asarray(t.numpy()) for n, t in v.items()} for k, v in p.items()}
    j = face_adapter(
        jp, jnp.asarray(local.numpy()), jnp.asarray(face.numpy()), HEADS, jops, frames_of=jnp.asarray(frames_of)
    )
    assert rel_err(np.asarray(j), got.numpy()) <= RTOL


def test_the_motion_encoder_equals_diffusers():
    """Face crops of 16 px (A14B: 512) through two residual blocks down to 4×4, a vector, the
    motion layers and the orthonormal basis; 20 coefficients."""
    from diffusers.models.transformers.transformer_wan_animate import WanAnimateMotionEncoder

    from parallel_wan.models.animate_motion import motion_encoder

    channels = {"4": 12, "8": 10, "16": 8}
    reference = randomised(
        WanAnimateMotionEncoder(size=16, style_dim=24, motion_dim=20, out_dim=32, channels=channels), 4
    )
    faces = np.random.default_rng(5).uniform(-1, 1, (3, 3, 16, 16)).astype(np.float32)
    with torch.no_grad():
        want = reference(torch.from_numpy(faces)).numpy()
    assert want.shape == (3, 32)
    for got in both_backends(lambda p, f, ops: motion_encoder(p, f, ops), reference.state_dict(), faces):
        assert got.shape == want.shape and rel_err(got, want) <= RTOL, rel_err(got, want)


# JAX's eager dispatch of ten blocks: over 5 s in the suite's run (tests/README.md)
@pytest.mark.parametrize("backend", ["torch", pytest.param("jax", marks=pytest.mark.slow)])
def test_the_animate_dit_equals_diffusers(backend):
    """The whole Animate DiT (models/animate_transformer.py) on a tiny random model of 10 blocks
    (face adapters after blocks 0 and 5): pose added to frames 1…, the CLIP image context in every
    cross-attention, the faces through the motion and face encoders."""
    from diffusers import WanAnimateTransformer3DModel

    from parallel_wan.models import transformer as dit
    from parallel_wan.models.animate_transformer import forward, segment_inputs
    from parallel_wan.models.rope import rope_tables
    from parallel_wan.models.transformer_config import TransformerConfig

    reference = randomised(
        WanAnimateTransformer3DModel(
            num_attention_heads=2,
            attention_head_dim=16,
            in_channels=36,
            latent_channels=16,
            out_channels=16,
            text_dim=16,
            freq_dim=32,
            ffn_dim=64,
            num_layers=10,
            image_dim=24,
            added_kv_proj_dim=32,
            motion_encoder_channel_sizes={"4": 12, "8": 10, "16": 8},
            motion_encoder_size=16,
            motion_style_dim=24,
            motion_dim=20,
            motion_encoder_dim=24,
            face_encoder_hidden_dim=16,
            face_encoder_num_heads=4,
        ),
        6,
    )
    rng = np.random.default_rng(7)
    hidden = rng.standard_normal((1, 36, 3, 4, 4)).astype(np.float32)  # reference frame + 2 latent frames
    pose = rng.standard_normal((1, 16, 2, 4, 4)).astype(np.float32)
    text = rng.standard_normal((1, 512, 16)).astype(np.float32)  # diffusers splits the image off at 512
    image = rng.standard_normal((1, 257, 24)).astype(np.float32)
    faces = rng.uniform(-1, 1, (1, 3, 5, 16, 16)).astype(np.float32)  # 5 face frames → 2 latent frames
    timestep = np.array([700.0], np.float32)
    with torch.no_grad():
        want = reference(
            torch.from_numpy(hidden),
            torch.from_numpy(timestep),
            torch.from_numpy(text),
            encoder_hidden_states_image=torch.from_numpy(image),
            pose_hidden_states=torch.from_numpy(pose),
            face_pixel_values=torch.from_numpy(faces),
            return_dict=False,
        )[0].numpy()

    cfg = TransformerConfig.from_diffusers(dict(reference.config))  # the Animate dimensions included
    assert cfg.animate is not None and cfg.animate.inject_face_latents_blocks == 5
    ops = tops if backend == "torch" else jops
    params = unflatten(
        {k: (v if backend == "torch" else jnp.asarray(v.numpy())) for k, v in reference.state_dict().items()}
    )
    put = torch.as_tensor if backend == "torch" else jnp.asarray
    grid = dit.patch_grid(cfg, hidden.shape)
    tokens = dit.patchify(put(hidden), cfg.patch_size, ops)
    pose_tokens = dit.patchify(put(pose), cfg.patch_size, ops)
    cos, sin = rope_tables(cfg.attention_head_dim, grid)
    inputs = segment_inputs(params, pose_tokens, put(image), put(faces), grid[1] * grid[2], cfg, ops)
    rope = (ops.asarray(cos), ops.asarray(sin))
    out = forward(params, tokens, put(timestep), put(text), inputs, rope, cfg, ops, ops.attention)
    got = np.asarray(ops.to_numpy(dit.unpatchify(out, grid, cfg.patch_size, ops)))
    assert got.shape == want.shape and rel_err(got, want) <= RTOL, rel_err(got, want)
