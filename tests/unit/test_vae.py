"""Wan VAEs (2.1: z 16; 2.2: z 48, residual, 2×2 patchify) against the references.

- numerics: diffusers 0.42's AutoencoderKLWan (decode(z).sample, encode(x).latent_dist.mode())
  and the official WanVAE_ modules (PyPI `wan22`, wan/modules/vae2_1.py and vae2_2.py, loaded
  as single files because importing the `wan` package needs flash_attn and CUDA);
- key map: diffusers' own single-file converter (`convert_wan_vae_to_diffusers`, Wan 2.1
  only) and, for both variants, loading official models' weights into diffusers strictly;
- latent (de)normalisation: as pipelines/wan/pipeline_wan.py and pipeline_wan_i2v.py write it.

Models are tiny and random (fp32, CPU). Tolerances: our code runs the same fp32 operations in
the same order and memory layout as the references, so results agree to the bit on this
machine; the bound is the project's fp32 budget, relative error ≤ 1e-5, leaving room for other
CPU kernels.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types

import pytest
import torch
from diffusers import AutoencoderKLWan
from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers
from harness.tiny_vae import TINY_VAE
from harness.vae_names import detect_variant

from parallel_wan.backends.torch import ops
from parallel_wan.models import vae
from parallel_wan.models.vae_config import VaeConfig
from parallel_wan.weights import tree
from parallel_wan.weights.vae_keymap import diffusers_to_official, official_to_diffusers

TOLERANCE = 1e-5  # fp32 relative error; see the module docstring

TINY = TINY_VAE  # tests/tiny_vae.py
VARIANTS = list(TINY)


def rel_err(a, b) -> float:
    return ((a - b).norm() / b.norm()).item()


# ---------------------------------------------------------------- references
def _official_path(filename: str) -> str:
    spec = importlib.util.find_spec("wan")
    candidates = []
    if spec is not None and spec.origin is not None:
        candidates.append(os.path.join(os.path.dirname(spec.origin), "modules", filename))
    for path in candidates:
        if os.path.exists(path):
            return path
    pytest.fail(
        f"the official Wan 2.2 package is not installed ({filename} not found); tests/unit/test_vae.py "
        "compares against it. Install it with: pip install --no-deps wan22==2.2.11"
    )


def _einops_stand_in() -> types.ModuleType:
    """The official VAE files import einops only for these five rearranges; einops is not a
    dependency of this project, so the test supplies them when it is missing."""

    def rearrange(x, pattern, **sizes):
        pattern = " ".join(pattern.replace("->", " -> ").split())
        if pattern == "b c t h w -> (b t) c h w":
            b, c, t, h, w = x.shape
            return x.permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w)
        if pattern == "(b t) c h w -> b c t h w":
            bt, c, h, w = x.shape
            t = sizes["t"]
            return x.reshape(bt // t, t, c, h, w).permute(0, 2, 1, 3, 4)
        if pattern == "b c f (h q) (w r) -> b (c r q) f h w":
            b, c, f, hq, wr = x.shape
            q, r = sizes["q"], sizes["r"]
            x = x.reshape(b, c, f, hq // q, q, wr // r, r).permute(0, 1, 6, 4, 2, 3, 5)
            return x.reshape(b, c * r * q, f, hq // q, wr // r)
        if pattern == "b (c r q) f h w -> b c f (h q) (w r)":
            b, crq, f, h, w = x.shape
            q, r = sizes["q"], sizes["r"]
            x = x.reshape(b, crq // (r * q), r, q, f, h, w).permute(0, 1, 4, 5, 3, 6, 2)
            return x.reshape(b, crq // (r * q), f, h * q, w * r)
        raise NotImplementedError(f"einops stand-in: pattern {pattern!r}")

    module = types.ModuleType("einops")
    module.rearrange = rearrange
    return module


def _load_official(filename: str):
    spec = importlib.util.spec_from_file_location(f"_official_{filename[:-3]}", _official_path(filename))
    module = importlib.util.module_from_spec(spec)
    stand_in = None
    if importlib.util.find_spec("einops") is None:
        stand_in = sys.modules.setdefault("einops", _einops_stand_in())
    try:
        spec.loader.exec_module(module)
    finally:
        if stand_in is not None and sys.modules.get("einops") is stand_in:
            del sys.modules["einops"]
    return module


@pytest.fixture(scope="module")
def official():
    return {"wan2.1": _load_official("vae2_1.py"), "wan2.2": _load_official("vae2_2.py")}


def official_model(module, cfg: VaeConfig, variant: str):
    """The official WanVAE_ with the same shape as `cfg`."""
    kwargs = dict(
        dim=cfg.base_dim,
        z_dim=cfg.z_dim,
        dim_mult=list(cfg.dim_mult),
        num_res_blocks=cfg.num_res_blocks,
        attn_scales=list(cfg.attn_scales),
        temperal_downsample=list(cfg.temperal_downsample),
    )
    if variant == "wan2.2":
        kwargs["dec_dim"] = cfg.decoder_dim
    return module.WanVAE_(**kwargs).eval()


def randomize_(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Perturb every parameter (norm gains included), so a misplaced tensor changes outputs."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen))
    return model


def params_of(state_dict) -> dict:
    """The param tree the orchestrator builds from a diffusers state dict."""
    return tree.unflatten(state_dict)


@pytest.fixture(scope="module")
def diffusers_vae():
    models = {}
    for seed, (variant, cfg) in enumerate(TINY.items()):
        torch.manual_seed(seed)
        model = randomize_(AutoencoderKLWan(**cfg.to_diffusers()).eval(), seed)
        models[variant] = (model, params_of(model.state_dict()))
    return models


def pixel_size(cfg: VaeConfig) -> int:
    return 4 * cfg.spatial_stride  # a 4×4 latent: 32×32 for Wan 2.1, 64×64 for Wan 2.2


# ---------------------------------------------------------------- numerics vs diffusers
@pytest.mark.parametrize("variant", VARIANTS)
@torch.no_grad()
def test_decode_matches_diffusers(variant, diffusers_vae):
    cfg = TINY[variant]
    model, params = diffusers_vae[variant]
    torch.manual_seed(10)
    z = torch.randn(2, cfg.z_dim, 3, 4, 4)
    ref = model.decode(z).sample
    out = vae.decode(params, z, ops, cfg)
    assert out.shape == ref.shape == (2, 3, 9, pixel_size(cfg), pixel_size(cfg))
    assert rel_err(out, ref) <= TOLERANCE


@pytest.mark.parametrize("variant", VARIANTS)
@torch.no_grad()
def test_encode_matches_diffusers(variant, diffusers_vae):
    cfg = TINY[variant]
    model, params = diffusers_vae[variant]
    torch.manual_seed(11)
    video = torch.rand(2, 3, 9, pixel_size(cfg), pixel_size(cfg)) * 2 - 1
    ref = model.encode(video).latent_dist.mode()
    out = vae.encode(params, video, ops, cfg)
    assert out.shape == ref.shape == (2, cfg.z_dim, 3, 4, 4)
    assert rel_err(out, ref) <= TOLERANCE


@torch.no_grad()
def test_bfloat16_follows_diffusers_casts():
    """bf16 weights and inputs: convs in bf16, RMS norm's normalise in fp32 and cast back, as
    diffusers does. Identical here; the bound allows about two bf16 ulps (2⁻⁸ each) of
    kernel rounding on other CPUs."""
    cfg = TINY["wan2.2"]
    torch.manual_seed(13)
    model = randomize_(AutoencoderKLWan(**cfg.to_diffusers()).eval(), 13).to(torch.bfloat16)
    params = params_of(model.state_dict())
    z = torch.randn(1, cfg.z_dim, 2, 4, 4, dtype=torch.bfloat16)
    out = vae.decode(params, z, ops, cfg)
    assert out.dtype == torch.bfloat16
    assert rel_err(out.float(), model.decode(z).sample.float()) <= 1e-2
    video = (torch.rand(1, 3, 5, 64, 64) * 2 - 1).to(torch.bfloat16)
    ref = model.encode(video).latent_dist.mode()
    assert rel_err(vae.encode(params, video, ops, cfg).float(), ref.float()) <= 1e-2


# ---------------------------------------------------------------- numerics vs official code
@pytest.mark.parametrize("variant", VARIANTS)
@torch.no_grad()
def test_official_weights_through_key_map_match_official_model(variant, official):
    """Official model → our key map → our decode/encode equals the official decode/encode."""
    cfg = TINY[variant]
    torch.manual_seed(20)
    model = randomize_(official_model(official[variant], cfg, variant), 20)
    params = params_of(official_to_diffusers(model.state_dict()))
    no_scale = [0.0, 1.0]  # the official encode/decode take (mean, 1/std); identity here
    z = torch.randn(1, cfg.z_dim, 3, 4, 4)
    ref = model.decode(z, no_scale).clamp(-1, 1)  # Wan2_x_VAE.decode clamps
    assert rel_err(vae.decode(params, z, ops, cfg), ref) <= TOLERANCE
    video = torch.rand(1, 3, 9, pixel_size(cfg), pixel_size(cfg)) * 2 - 1
    assert rel_err(vae.encode(params, video, ops, cfg), model.encode(video, no_scale)) <= TOLERANCE


# ---------------------------------------------------------------- chunked, functional cache
@pytest.mark.parametrize("variant", VARIANTS)
@torch.no_grad()
def test_decode_cache_is_a_value_with_fixed_structure(variant, diffusers_vae):
    """The cache passed in is left alone, and from the first chunk on it keeps one structure
    and shape (what a scan needs); several latent frames per later call give the same video."""
    cfg = TINY[variant]
    _, params = diffusers_vae[variant]
    torch.manual_seed(30)
    z = torch.randn(1, cfg.z_dim, 3, 4, 4)
    first, cache1 = vae.decode_chunk(params, z[:, :, :1], None, ops, cfg)
    snapshot = {k: v.clone() for k, v in cache1.items()}
    second, cache2 = vae.decode_chunk(params, z[:, :, 1:2], cache1, ops, cfg)
    assert set(cache1) == set(snapshot) and all(torch.equal(cache1[k], snapshot[k]) for k in cache1)
    assert {k: v.shape for k, v in cache1.items()} == {k: v.shape for k, v in cache2.items()}
    assert first.shape[2] == 1 and second.shape[2] == cfg.temporal_stride
    rest, _ = vae.decode_chunk(params, z[:, :, 1:], cache1, ops, cfg)
    whole = vae.decode(params, z, ops, cfg)
    assert rel_err(torch.cat([first, rest], 2), whole) <= TOLERANCE


@pytest.mark.parametrize("variant", VARIANTS)
@torch.no_grad()
def test_encode_cache_has_fixed_structure(variant, diffusers_vae):
    cfg = TINY[variant]
    _, params = diffusers_vae[variant]
    video = torch.rand(1, 3, 9, pixel_size(cfg), pixel_size(cfg)) * 2 - 1
    _, cache1 = vae.encode_chunk(params, video[:, :, :1], None, ops, cfg)
    _, cache2 = vae.encode_chunk(params, video[:, :, 1:5], cache1, ops, cfg)
    assert {k: v.shape for k, v in cache1.items()} == {k: v.shape for k, v in cache2.items()}


def test_bad_inputs_say_what_to_do(diffusers_vae):
    cfg = TINY["wan2.1"]
    _, params = diffusers_vae["wan2.1"]
    with pytest.raises(ValueError, match="1 \\+ 4·k frames, got 8"):
        vae.encode(params, torch.zeros(1, 3, 8, 32, 32), ops, cfg)
    with pytest.raises(ValueError, match="multiples of 8"):
        vae.encode(params, torch.zeros(1, 3, 5, 36, 32), ops, cfg)
    with pytest.raises(ValueError, match="z_dim=16"):
        vae.decode(params, torch.zeros(1, 48, 2, 4, 4), ops, cfg)
    with pytest.raises(ValueError, match="first VAE decode chunk"):
        vae.decode_chunk(params, torch.zeros(1, 16, 2, 4, 4), None, ops, cfg)


# ---------------------------------------------------------------- latent normalisation
@pytest.mark.parametrize("variant", VARIANTS)
def test_latent_normalisation_matches_pipelines(variant):
    cfg = VaeConfig.wan2_1() if variant == "wan2.1" else VaeConfig.wan2_2()
    torch.manual_seed(40)
    z = torch.randn(2, cfg.z_dim, 3, 4, 5) * 2
    # pipeline_wan.py (before vae.decode) and pipeline_wan_i2v.py (after vae.encode):
    latents_mean = torch.tensor(cfg.latents_mean).view(1, cfg.z_dim, 1, 1, 1).to(z.dtype)
    latents_std = 1.0 / torch.tensor(cfg.latents_std).view(1, cfg.z_dim, 1, 1, 1).to(z.dtype)
    assert torch.equal(vae.denormalize_latents(z, cfg, ops), z / latents_std + latents_mean)
    assert torch.equal(vae.normalize_latents(z, cfg, ops), (z - latents_mean) * latents_std)
    back = vae.normalize_latents(vae.denormalize_latents(z, cfg, ops), cfg, ops)
    assert rel_err(back, z) <= 1e-6  # two fp32 roundings per element


# ---------------------------------------------------------------- config
def _official_wrapper_facts(module, wrapper_name: str):
    """(mean, std, WanVAE_ on the meta device) exactly as the official Wan2_x_VAE wrapper
    builds them, without reading a checkpoint."""
    captured: dict = {}
    built: dict = {}

    def capture(pretrained_path=None, **kwargs):
        captured.update(kwargs)
        return torch.nn.Module()

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(module, "_video_vae", capture)
        mean, inv_std = getattr(module, wrapper_name)(vae_pth=None, device="cpu").scale

    class Built(module.WanVAE_):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            built["model"] = self

        def load_state_dict(self, *args, **kwargs):  # there is no checkpoint to load
            return None

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(module, "WanVAE_", Built)
        mp.setattr(module.torch, "load", lambda *args, **kwargs: {})
        module._video_vae(pretrained_path=None, **captured)  # builds on the meta device
    return mean, 1.0 / inv_std, built["model"]


def _names_and_shapes(state_dict) -> dict:
    return {k: tuple(v.shape) for k, v in state_dict.items()}


@pytest.mark.parametrize("variant,wrapper", [("wan2.1", "Wan2_1_VAE"), ("wan2.2", "Wan2_2_VAE")])
def test_presets_match_official_checkpoints(variant, wrapper, official):
    """Preset → diffusers model (meta device) has, under our key map, exactly the official
    model's parameter names and shapes; latents_mean/std are the official wrapper's."""
    cfg = VaeConfig.wan2_1() if variant == "wan2.1" else VaeConfig.wan2_2()
    mean, std, official_vae = _official_wrapper_facts(official[variant], wrapper)
    assert torch.equal(torch.tensor(cfg.latents_mean), mean)
    assert torch.allclose(torch.tensor(cfg.latents_std), std, rtol=1e-6, atol=0)  # std = 1/(1/std)
    with torch.device("meta"):
        ours = AutoencoderKLWan(**cfg.to_diffusers())
    expected = _names_and_shapes(official_vae.state_dict())
    assert _names_and_shapes(diffusers_to_official(ours.state_dict())) == expected
    assert (cfg.temporal_stride, cfg.spatial_stride) == ((4, 8) if variant == "wan2.1" else (4, 16))


def test_wan2_1_preset_is_diffusers_default():
    with torch.device("meta"):
        default = AutoencoderKLWan()
    ours = VaeConfig.wan2_1().to_diffusers()
    assert {k: default.config[k] for k in ours} == ours


def test_config_round_trip_and_errors():
    for cfg in (VaeConfig.wan2_1(), VaeConfig.wan2_2(), *TINY.values()):
        assert VaeConfig.from_diffusers(cfg.to_diffusers()) == cfg
    extra = VaeConfig.from_diffusers({**VaeConfig.wan2_2().to_diffusers(), "clip_output": False, "_class_name": "x"})
    assert extra == VaeConfig.wan2_2() and extra.extra["clip_output"] is False
    with pytest.raises(ValueError, match="latents_mean has 16 values but z_dim is 48"):
        VaeConfig(z_dim=48)
    with pytest.raises(ValueError, match="attn_scales is \\[1.0\\]"):
        VaeConfig(attn_scales=(1.0,))
    with pytest.raises(ValueError, match="scale_factor_spatial is 8 but .* stride of 16"):
        VaeConfig(patch_size=2, in_channels=12)


# ---------------------------------------------------------------- key map
def test_key_map_equals_diffusers_single_file_converter(official):
    """diffusers' converter handles only the Wan 2.1 layout with num_res_blocks 2 (it hard-codes
    the flat decoder indices), so the oracle comparison uses that shape."""
    cfg = VaeConfig(base_dim=4, z_dim=16, num_res_blocks=2)
    sd = official_model(official["wan2.1"], cfg, "wan2.1").state_dict()
    theirs = convert_wan_vae_to_diffusers(sd)
    ours = official_to_diffusers(sd)
    assert set(ours) == set(theirs)
    assert all(ours[k] is theirs[k] for k in ours)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("num_res_blocks", [1, 2])
def test_key_map_round_trips_and_loads_strictly(variant, num_res_blocks, official):
    """official → diffusers loads into AutoencoderKLWan with strict=True (every name and shape
    matches); both directions round-trip to the identity."""
    base = TINY[variant]
    cfg = VaeConfig.from_diffusers(
        {
            **base.to_diffusers(),
            "num_res_blocks": num_res_blocks,
            "base_dim": 4,
            "decoder_base_dim": 8 if base.is_residual else None,
        }
    )
    official_sd = official_model(official[variant], cfg, variant).state_dict()
    mapped = official_to_diffusers(official_sd, variant)
    AutoencoderKLWan(**cfg.to_diffusers()).load_state_dict(mapped, strict=True)
    assert list(diffusers_to_official(mapped)) == list(official_sd)
    diffusers_names = list(AutoencoderKLWan(**cfg.to_diffusers()).state_dict())
    assert official_to_diffusers(diffusers_to_official(diffusers_names)) == diffusers_names
    assert detect_variant(official_sd) == detect_variant(diffusers_names) == variant


def test_key_map_rejects_mismatched_variant_and_unknown_names():
    with pytest.raises(ValueError, match="pass variant='wan2.1'"):
        official_to_diffusers(["encoder.downsamples.0.residual.0.gamma"], "wan2.2")
    with pytest.raises(ValueError, match="not a Wan VAE parameter name"):
        official_to_diffusers(["encoder.downsamples.0.residual.0.gamma", "text_encoder.weight"])
