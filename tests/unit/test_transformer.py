"""Our Wan DiT equals diffusers' WanTransformer3DModel with the same weights."""

import numpy as np
import pytest
import torch
from diffusers import WanTransformer3DModel

from parallel_wan.backends.torch import ops
from parallel_wan.models import transformer as dit
from parallel_wan.models.rope import rope_tables
from parallel_wan.models.transformer_config import TransformerConfig
from parallel_wan.weights.tree import unflatten

# fp32 on CPU: the two implementations differ only in reduction order (conv3d vs matmul for
# the patch embedding, fused vs unfused norms); measured ~1e-7, so 1e-5 leaves margin while
# still catching any real deviation (a wrong cast or rope sign is ≥ 1e-3).
RTOL = 1e-5


def rel_err(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def tiny_model(in_channels, out_channels, seed=0):
    torch.manual_seed(seed)
    model = WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=4,
        attention_head_dim=16,
        in_channels=in_channels,
        out_channels=out_channels,
        text_dim=32,
        freq_dim=32,
        ffn_dim=96,
        num_layers=2,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        eps=1e-6,
        rope_max_seq_len=1024,
    ).eval()
    # diffusers zero-initialises nothing we rely on, but randomise every tensor so no path is
    # trivially zero (e.g. biases).
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    return model


def ours(model, hidden, timestep, context, cond=None):
    cfg = TransformerConfig.from_diffusers(dict(model.config))
    params = unflatten(model.state_dict())
    grid = dit.patch_grid(cfg, hidden.shape)
    tokens = dit.patchify(hidden, cfg.patch_size, ops)
    if cond is not None:
        tokens = dit.join_channels([tokens, dit.patchify(cond, cfg.patch_size, ops)], cfg.patch_size, ops)
    cos, sin = rope_tables(cfg.attention_head_dim, grid)
    rope = (ops.asarray(cos), ops.asarray(sin))
    out = dit.forward(params, tokens, timestep, context, rope, cfg, ops, ops.attention)
    return dit.unpatchify(out, grid, cfg.patch_size, ops)


@pytest.mark.parametrize("kind", ["t2v", "i2v", "ti2v"])
def test_forward_matches_diffusers(kind):
    in_ch, out_ch = {"t2v": (16, 16), "i2v": (36, 16), "ti2v": (48, 48)}[kind]
    model = tiny_model(in_ch, out_ch)
    torch.manual_seed(1)
    noise_ch = 16 if kind == "i2v" else in_ch
    noise = torch.randn(2, noise_ch, 3, 6, 8)
    cond = torch.randn(2, 20, 3, 6, 8) if kind == "i2v" else None
    context = torch.randn(2, 512, 32)
    if kind == "ti2v":
        # per-token timesteps: first latent frame is the clean image (t = 0)
        tokens = 3 * 3 * 4
        timestep = torch.full((2, tokens), 937.0)
        timestep[:, : 3 * 4] = 0.0
    else:
        timestep = torch.tensor([937.0, 937.0])
    full = noise if cond is None else torch.cat([noise, cond], dim=1)
    with torch.no_grad():
        ref = model(full, timestep, context, return_dict=False)[0]
        got = ours(model, noise, timestep, context, cond)
    assert got.shape == ref.shape
    assert rel_err(got, ref) <= RTOL


def test_patchify_roundtrip_and_token_order():
    x = torch.randn(1, 5, 3, 4, 6)
    tokens = dit.patchify(x, (1, 2, 2), ops)
    assert tokens.shape == (1, 3 * 2 * 3, 4 * 5)
    assert torch.equal(dit.unpatchify(tokens, (3, 2, 3), (1, 2, 2), ops), x)


def test_rope_tables_global_positions_and_padding():
    cos, sin = rope_tables(16, (3, 2, 4))
    idx = np.array([5, 17, 23, 24, 30])  # 24 and 30 lie past the 24-token grid: padding
    c2, s2 = rope_tables(16, (3, 2, 4), token_index=idx)
    np.testing.assert_array_equal(c2[:3], cos[idx[:3]])
    np.testing.assert_array_equal(c2[3:], 1.0)
    np.testing.assert_array_equal(s2[3:], 0.0)


def test_bf16_close_to_fp32():
    # bf16 weights with fp32 norms/modulation: the bf16 run should track fp32 to bf16 precision.
    model = tiny_model(16, 16)
    torch.manual_seed(2)
    x, ctx, t = torch.randn(1, 16, 2, 4, 4), torch.randn(1, 512, 32), torch.tensor([500.0])
    with torch.no_grad():
        ref = ours(model, x, t, ctx)
        cfg = TransformerConfig.from_diffusers(dict(model.config))
        from parallel_wan.weights.tree import map_leaves

        params = map_leaves(lambda n, v: v if dit.keeps_fp32(n) else v.bfloat16(), unflatten(model.state_dict()))
        grid = dit.patch_grid(cfg, x.shape)
        cos, sin = rope_tables(cfg.attention_head_dim, grid)
        out = dit.forward(
            params,
            dit.patchify(x, cfg.patch_size, ops).bfloat16(),
            t,
            ctx.bfloat16(),
            (ops.asarray(cos), ops.asarray(sin)),
            cfg,
            ops,
            ops.attention,
        )
        got = dit.unpatchify(out, grid, cfg.patch_size, ops)
    assert got.dtype == torch.bfloat16
    assert rel_err(got.float(), ref) < 3e-2  # a few bf16 ulps (2^-8) accumulated over 2 layers


@pytest.mark.parametrize(
    "name",
    [
        "wan2.2_t2v_a14b",
        "wan2.2_i2v_a14b",
        "wan2.2_ti2v_5b",
        "wan2.2_animate_14b",
        "tiny",
        "tiny_i2v",
        "tiny_ti2v",
        "tiny_animate",
    ],
)
def test_the_models_parameter_table_is_diffusers_model(name):
    """models/transformer_shapes.py is the one source of the DiT's parameters (checkpoint checks,
    LoRA checks, the planner, AOT compiles); it must name exactly what diffusers' model holds
    (Animate's: WanAnimateTransformer3DModel, with its image branch, motion and face encoders)."""
    import diffusers

    from parallel_wan.models.registry import ARCHITECTURES
    from parallel_wan.models.transformer_shapes import param_shapes

    cfg = ARCHITECTURES[name].transformer
    with torch.device("meta"):
        model = getattr(diffusers, cfg.diffusers_class)(**cfg.to_diffusers())
    assert param_shapes(cfg) == {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert TransformerConfig.from_diffusers(dict(model.config)) == cfg  # the config reads back as written
