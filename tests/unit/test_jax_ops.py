"""The JAX ops namespace runs the one model definition to the torch backend's numbers.

- op by op: every function whose torch definition has a detail that moves numbers (eps
  placement, tanh GELU, half-to-even rounding, chunk sizes, conv padding, bf16 upcasts);
- the Wan DiT (t2v, i2v with joined channels, ti2v with per-token timesteps) and both VAEs
  (decode and encode), through `placement` onto a one-device mesh, against torch ops on the
  same weights;
- compile once: the jitted forward's program is the same for 2 and 8 layers (one lax.scan);
- placement: the layer-stacking rule, the dtype policy, bf16 without a float32 round trip.

Tolerance: fp32 everywhere; the backends run the same operations, differing only in XLA's vs
ATen's reduction order and fusion (measured 5e-7 for the DiT, 1.3e-6 for the VAE decoders,
whose ~20 stacked convs amplify rounding). The project's fp32 budget, relative error ≤ 1e-5,
still catches any real deviation (a wrong cast, eps or rope sign is ≥ 1e-3).
"""

from __future__ import annotations

import re
import time

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch
from diffusers import AutoencoderKLWan, WanTransformer3DModel
from harness.tiny_vae import TINY_VAE
from jax.sharding import PartitionSpec as P

from parallel_wan.backends.jax import ops as jops, placement
from parallel_wan.backends.jax.sequence_parallel import build_mesh
from parallel_wan.backends.torch import ops as tops
from parallel_wan.models import transformer as dit, vae
from parallel_wan.models.rope import rope_tables
from parallel_wan.models.transformer_config import TransformerConfig
from parallel_wan.weights.tree import unflatten

RTOL = 1e-5  # see the module docstring


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def one_device():
    return build_mesh(devices=jax.devices()[:1])


# ---------------------------------------------------------------- op by op
def _t(x):
    return torch.from_numpy(np.asarray(x))


OPS = {
    # name: (call on a namespace, inputs)
    "layer_norm": (lambda o, x, w, b: o.layer_norm(x, w, b, 1e-6), ("x", "w", "b")),
    "layer_norm_plain": (lambda o, x: o.layer_norm(x, eps=1e-3), ("x",)),
    "rms_norm": (lambda o, x, w: o.rms_norm(x, w, 1e-6), ("x", "w")),
    "l2_normalize": (lambda o, x: o.l2_normalize(x, axis=1), ("x",)),
    "gelu_tanh": (lambda o, x: o.gelu(x, approximate=True), ("x",)),
    "gelu_erf": (lambda o, x: o.gelu(x), ("x",)),
    "silu": (lambda o, x: o.silu(x), ("x",)),
    "softmax": (lambda o, x: o.softmax(x, axis=1), ("x",)),
    "linear": (lambda o, x, m, b: o.linear(x, m, b), ("x", "m", "b6")),
    "conv3d": (lambda o, v, k, c: o.conv3d(v, k, c, stride=(1, 2, 1), padding=(0, 1, 1)), ("v", "k3", "c")),
    "conv2d": (lambda o, i, k, c: o.conv2d(i, k, c, stride=(2, 2), padding=(1, 0)), ("i", "k2", "c")),
    "attention": (lambda o, q, kk, vv: o.attention(q, kk, vv, scale=0.3), ("q", "kk", "vv")),
    "split_chunks": (lambda o, x: o.concat(o.split(x, 4, axis=1)[::-1], axis=1), ("x",)),
    "pad_repeat_tile": (lambda o, x: o.tile(o.repeat(o.pad(x, [(1, 0), (0, 2)], 0.5), 2, 0), (2, 1)), ("x",)),
    "squeeze_expand": (lambda o, x: o.broadcast_to(o.squeeze(o.squeeze(x, 0), 1)[None], (3, -1, -1)), ("x1",)),
}


def _inputs():
    rng = np.random.default_rng(0)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return {
        "x": r(5, 6) * 3,
        "w": r(6),
        "b": r(6),
        "m": r(7, 6),
        "b6": r(7),
        "x1": r(1, 5, 4),
        "v": r(2, 3, 4, 6, 5),
        "k3": r(4, 3, 3, 3, 3),
        "c": r(4),
        "i": r(2, 3, 7, 6),
        "k2": r(4, 3, 3, 3),
        "q": r(2, 5, 3, 8),
        "kk": r(2, 7, 3, 8),
        "vv": r(2, 7, 3, 8),
    }


@pytest.mark.parametrize("op", list(OPS))
def test_op_matches_torch(op):
    fn, names = OPS[op]
    data = _inputs()
    ref = fn(tops, *(_t(data[n]) for n in names)).numpy()
    got = np.asarray(fn(jops, *(jnp.asarray(data[n]) for n in names)))
    assert got.shape == ref.shape
    assert rel_err(got, ref) <= 1e-6  # one op: a few ulps at most


def test_rounding_eps_and_bf16_semantics():
    # round half to even, like torch.round
    halves = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5], np.float32)
    np.testing.assert_array_equal(np.asarray(jops.round(jnp.asarray(halves))), tops.round(_t(halves)).numpy())
    # F.normalize clamps the norm at eps (no eps under the root): a zero vector stays zero
    tiny = np.zeros((1, 3), np.float32)
    tiny[0, 0] = 1e-13
    np.testing.assert_array_equal(
        np.asarray(jops.l2_normalize(jnp.asarray(tiny), 1)), tops.l2_normalize(_t(tiny), 1).numpy()
    )
    # bf16 norms: normalised in float32, cast back, then the gain — as torch does
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((4, 64)).astype(np.float32) * 5, rng.standard_normal(64).astype(np.float32)
    for name in ("rms_norm", "layer_norm"):
        ours = getattr(jops, name)(jnp.asarray(x, jnp.bfloat16), jnp.asarray(w, jnp.bfloat16))
        theirs = getattr(tops, name)(_t(x).bfloat16(), _t(w).bfloat16())
        assert ours.dtype == jnp.bfloat16
        # identical up to one bf16 ulp where float32 rounding of the statistics differs
        theirs = theirs.float().numpy()
        assert np.max(np.abs(np.asarray(ours, np.float32) - theirs)) <= 2**-8 * np.abs(theirs).max()
    assert jops.dtype_name(jnp.zeros(1, jnp.bfloat16)) == "bfloat16"


# ---------------------------------------------------------------- the DiT
def tiny_dit(in_channels, out_channels, num_layers=2, seed=0):
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
        num_layers=num_layers,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        eps=1e-6,
        rope_max_seq_len=1024,
    ).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.2)  # no trivially zero path
    return TransformerConfig.from_diffusers(dict(model.config)), unflatten(model.state_dict())


def dit_inputs(kind):
    torch.manual_seed(1)
    noise = torch.randn(2, 48 if kind == "ti2v" else 16, 3, 6, 8)
    cond = torch.randn(2, 20, 3, 6, 8) if kind == "i2v" else None
    context = torch.randn(2, 512, 32)
    if kind == "ti2v":
        timestep = torch.full((2, 3 * 3 * 4), 937.0)
        timestep[:, : 3 * 4] = 0.0  # first latent frame: the clean image
    else:
        timestep = torch.tensor([937.0, 421.0])
    return noise, cond, timestep, context


def dit_tokens(cfg, noise, cond, ops, to):
    tokens = dit.patchify(to(noise), cfg.patch_size, ops)
    if cond is not None:
        tokens = dit.join_channels([tokens, dit.patchify(to(cond), cfg.patch_size, ops)], cfg.patch_size, ops)
    return tokens


def jax_forward(cfg):
    return jax.jit(lambda p, x, t, c, cos, sin: dit.forward(p, x, t, c, (cos, sin), cfg, jops, jops.attention))


@pytest.mark.parametrize("kind", ["t2v", "i2v", "ti2v"])
def test_transformer_matches_torch(kind, one_device):
    cfg, params = tiny_dit(*{"t2v": (16, 16), "i2v": (36, 16), "ti2v": (48, 48)}[kind])
    noise, cond, timestep, context = dit_inputs(kind)
    grid = dit.patch_grid(cfg, noise.shape)
    cos, sin = rope_tables(cfg.attention_head_dim, grid)
    with torch.no_grad():
        tokens = dit_tokens(cfg, noise, cond, tops, lambda x: x)
        ref = dit.forward(params, tokens, timestep, context, (_t(cos), _t(sin)), cfg, tops, tops.attention)

    placed = placement.place(params, one_device, "float32", keep_fp32=dit.keeps_fp32)
    assert placed["blocks"]["attn1"]["to_q"]["weight"].shape == (2, 64, 64)  # stacked for the scan
    tokens = dit_tokens(cfg, noise, cond, jops, lambda x: jnp.asarray(x.numpy()))
    out = jax_forward(cfg)(placed, tokens, jnp.asarray(timestep.numpy()), jnp.asarray(context.numpy()), cos, sin)
    assert out.shape == ref.shape
    assert rel_err(out, ref.numpy()) <= RTOL


def test_layer_scan_compiles_once(one_device):
    """The jitted forward lowers to the same program for 2 and 8 layers, numbers aside (the
    layer count appears only in shapes and the scan's trip count): one lax.scan, so compile
    time does not grow with depth. Timings are printed, not asserted (benchmarks/ owns speed)."""
    cfg, params = tiny_dit(16, 16)
    noise, cond, timestep, context = dit_inputs("t2v")
    cos, sin = rope_tables(cfg.attention_head_dim, dit.patch_grid(cfg, noise.shape))
    tokens = dit_tokens(cfg, noise, cond, jops, lambda x: jnp.asarray(x.numpy()))
    programs, seconds = {}, {}
    for layers in (2, 8):
        deep = dict(params, blocks=[params["blocks"][i % 2] for i in range(layers)])
        placed = placement.place(deep, one_device, "float32")
        lowered = jax_forward(cfg).lower(
            placed, tokens, jnp.asarray(timestep.numpy()), jnp.asarray(context.numpy()), cos, sin
        )
        programs[layers] = lowered.as_text()
        start = time.perf_counter()
        lowered.compile()
        seconds[layers] = time.perf_counter() - start
    print(f"compile seconds: 2 layers {seconds[2]:.2f}, 8 layers {seconds[8]:.2f}")
    assert "stablehlo.while" in programs[2]
    assert re.sub(r"\d+", "#", programs[2]) == re.sub(r"\d+", "#", programs[8])


# ---------------------------------------------------------------- the VAEs

# XLA:CPU's LLVM optimisation level changes the machine code's speed, not the fp32
# operations; level 0 halves the tiny VAEs' compile time (≈5 s → ≈2.4 s each).
FAST_COMPILE = {"xla_backend_optimization_level": 0}


@pytest.mark.parametrize("variant", list(TINY_VAE))
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_vae_decode_and_encode_match_torch(variant, one_device):
    cfg = TINY_VAE[variant]
    torch.manual_seed(3)
    model = AutoencoderKLWan(**cfg.to_diffusers()).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))  # norm gains away from 1, biases away from 0
    params = unflatten(model.state_dict())
    # 2 latent frames / 5 video frames: the first chunk and one cached chunk, every code path.
    z = torch.randn(1, cfg.z_dim, 2, 4, 4)
    size = 4 * cfg.spatial_stride
    video = torch.rand(1, 3, 5, size, size) * 2 - 1
    with torch.no_grad():
        ref_frames = vae.decode(params, z, tops, cfg).numpy()
        ref_latents = vae.encode(params, video, tops, cfg).numpy()

    placed = placement.place(params, one_device, "float32")
    assert isinstance(placed["decoder"]["up_blocks"], list)  # only "blocks" is stacked
    zj, vj = jnp.asarray(z.numpy()), jnp.asarray(video.numpy())
    decode = jax.jit(lambda p, x: vae.decode(p, x, jops, cfg)).lower(placed, zj).compile(FAST_COMPILE)
    encode = jax.jit(lambda p, x: vae.encode(p, x, jops, cfg)).lower(placed, vj).compile(FAST_COMPILE)
    frames, latents = decode(placed, zj), encode(placed, vj)
    assert frames.shape == ref_frames.shape and latents.shape == ref_latents.shape
    assert rel_err(frames, ref_frames) <= RTOL
    assert rel_err(latents, ref_latents) <= RTOL


# ---------------------------------------------------------------- placement
def test_placement_dtypes_and_stacking_rule(one_device):
    torch.manual_seed(4)
    w32 = torch.randn(3, 4)
    tree = {
        "blocks": [
            {"norm2": {"weight": torch.randn(4)}, "ffn": {"net": [{"proj": {"weight": w32 + i}}, None]}}
            for i in range(3)
        ],
        "up_blocks": [{"weight": torch.randn(2)}, {"weight": torch.randn(5)}],  # not uniform: stays a list
        "proj_out": {"weight": w32.bfloat16(), "steps": torch.arange(3)},
    }
    placed = placement.place(tree, one_device, "bfloat16", keep_fp32=dit.keeps_fp32)
    blocks = placed["blocks"]
    assert blocks["ffn"]["net"][1] is None and blocks["ffn"]["net"][0]["proj"]["weight"].shape == (3, 3, 4)
    assert blocks["norm2"]["weight"].dtype == jnp.float32  # keep_fp32 sees "blocks.0.norm2.weight"
    assert blocks["ffn"]["net"][0]["proj"]["weight"].dtype == jnp.bfloat16
    assert isinstance(placed["up_blocks"], list) and placed["up_blocks"][1]["weight"].shape == (5,)
    assert placed["proj_out"]["steps"].dtype == jnp.int32  # non-float leaves keep their (x32) type
    # fp32 → bf16 rounds exactly as torch's .to(bfloat16) (round to nearest even) ...
    want = torch.stack([w32 + i for i in range(3)]).bfloat16().view(torch.int16).numpy()
    got = np.asarray(blocks["ffn"]["net"][0]["proj"]["weight"]).view(np.int16)
    np.testing.assert_array_equal(got, want)
    # ... and a bf16 source is reinterpreted, never widened: the host view shares torch's memory
    src = w32.bfloat16()
    view = placement.host_array(src)
    assert view.dtype == ml_dtypes.bfloat16 and view.ctypes.data == src.data_ptr()
    np.testing.assert_array_equal(
        np.asarray(placed["proj_out"]["weight"]).view(np.int16), src.view(torch.int16).numpy()
    )
    with pytest.raises(ValueError, match=r"params\['blocks'\]\[1\] differs from layer 0"):
        placement.to_host({"blocks": [{"w": torch.zeros(2)}, {"w": torch.zeros(3)}]})


@pytest.mark.parametrize("layout", ["diffusers", "official"])
def test_loader_stacks_reach_the_host_tree_without_a_copy(tmp_path, layout):
    """The loader writes each block tensor's layers into one (L, ...) buffer in the run's dtype
    (weights/stacked.py); placement hands those buffers over as they are — the host tree shares
    their memory — and copies (with the cast) only where a dtype changes."""
    from parallel_wan.builtin.tiny import build_tiny, write_checkpoint
    from parallel_wan.weights.loader import load_transformer

    write_checkpoint(build_tiny(kind="t2v", seed=0), str(tmp_path), layout=layout)
    params = load_transformer(str(tmp_path), "high_noise", "bfloat16", dit.keeps_fp32)
    host = placement.to_host(params, "bfloat16", dit.keeps_fp32)
    for name in ("attn1.to_q.weight", "ffn.net.0.proj.weight", "norm2.weight"):  # bf16, bf16, fp32-kept
        layers = [placement._get(layer, name) for layer in params["blocks"]]
        stacked = placement._get(host["blocks"], name)
        assert stacked.ctypes.data == layers[0].data_ptr(), name  # the loader's buffer itself
        np.testing.assert_array_equal(stacked[1].view(np.uint8), placement.host_array(layers[1]).view(np.uint8))
    widened = placement.to_host(params, "float32", dit.keeps_fp32)["blocks"]["attn1"]["to_q"]["weight"]
    assert (
        widened.dtype == np.float32 and widened.ctypes.data != params["blocks"][0]["attn1"]["to_q"]["weight"].data_ptr()
    )


def test_fsdp_spec_rule():
    mesh = build_mesh(2, 2, 2)
    all_axes = ("dp", "ring", "ulysses")
    assert placement.fsdp_spec((40, 5120, 13824), mesh, all_axes, stacked=True) == P(None, None, all_axes)
    assert placement.fsdp_spec((40, 5120, 13824), mesh, all_axes, stacked=False) == P(None, None, all_axes)
    assert placement.fsdp_spec((5120, 4096), mesh, ["ulysses"], stacked=False) == P("ulysses", None)
    assert placement.fsdp_spec((5120,), mesh, all_axes, stacked=False) == P()  # small: replicated
    assert placement.fsdp_spec((40, 1, 6, 5121), mesh, all_axes, stacked=True, min_size=1) == P()  # nothing divides
