"""Architectures by name: every model this project runs, the real ones and the built-in tiny
ones side by side, so a model's dimensions are written down once.

The names are what the model presets name (`conf/model/<name>.yaml`, `architecture:`). A preset
says how to *run* a model (steps, size, guidance); an architecture says what the model *is*: its
variant (variants.py: the inputs it takes, per-token timesteps, its experts), layer sizes, VAE
and text encoder. Everything asks by the preset's architecture name (`architecture`), never by
task, so two architectures of one task each keep their own dimensions. With a checkpoint the
checkpoint's own configs win (weights/layout.py reads them); the registry is what the planner, the
benchmarks, early validation and the tiny model's builder use when there are no weights to read.

Plain data (no torch, no jax): the text encoder is a dict of transformers' `UMT5Config`
fields, so this file can be imported by anything.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .animate_config import AnimateConfig
from .s2v_config import S2VConfig
from .transformer_config import TransformerConfig
from .vae_config import VaeConfig
from .variants import ANIMATE, I2V, S2V, T2V, TI2V, Variant

TEXT_LEN = 512  # UMT5 tokens per prompt, the references' text_len

# UMT5-XXL encoder (google/umt5-xxl, as Wan ships it in bf16): transformers' UMT5Config fields.
UMT5_XXL = dict(
    vocab_size=256384,
    d_model=4096,
    d_kv=64,
    num_heads=64,
    d_ff=10240,
    num_layers=24,
    feed_forward_proj="gated-gelu",
    tie_word_embeddings=False,
)

# The tiny text encoder: vocab_size is left out on purpose, it follows the built-in tokenizer
# (builtin/tiny.py rounds the tokenizer's length up to a multiple of 8).
TINY_TEXT_DIM = 32
TINY_UMT5 = dict(
    d_model=TINY_TEXT_DIM,
    d_kv=8,
    num_heads=4,
    d_ff=64,
    num_layers=2,
    relative_attention_num_buckets=32,
    relative_attention_max_distance=128,
    feed_forward_proj="gated-gelu",
    tie_word_embeddings=False,
)


# CLIP ViT-H/14 (laion/CLIP-ViT-H-14-laion2B-s32B-b79K, Animate's image encoder): transformers'
# CLIPVisionConfig fields. Animate reads the penultimate layer's hidden states (257 × 1280).
CLIP_VIT_H = dict(
    hidden_size=1280,
    intermediate_size=5120,
    num_hidden_layers=32,
    num_attention_heads=16,
    patch_size=14,
    image_size=224,
    hidden_act="gelu",
    projection_dim=1024,
    layer_norm_eps=1e-5,
)
TINY_CLIP = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=3,  # the penultimate layer's output is what Animate reads: ≥ 2 layers run
    num_attention_heads=16,  # the official ViT-H/14 has 16 heads whatever the width (weights/clip_keymap.py)
    patch_size=14,
    image_size=28,  # 2 × 2 patches and the class token: 5 image tokens
    hidden_act="gelu",
    projection_dim=16,
    layer_norm_eps=1e-5,
)


# wav2vec2-large-xlsr-53-english (S2V-14B's audio encoder): transformers' Wav2Vec2Config fields.
# S2V weighs all 25 hidden states (the 24 layers' and the input's), 1024 wide.
WAV2VEC_LARGE = dict(
    hidden_size=1024,
    num_hidden_layers=24,
    num_attention_heads=16,
    intermediate_size=4096,
    conv_dim=(512,) * 7,
    conv_bias=True,
    do_stable_layer_norm=True,
    feat_extract_norm="layer",
    vocab_size=33,
)
# The tiny one keeps the 24 layers (the transformer weighs 25 hidden states) and shrinks the widths.
TINY_WAV2VEC = dict(
    hidden_size=16,
    num_hidden_layers=24,
    num_attention_heads=2,
    intermediate_size=32,
    conv_dim=(8,) * 7,
    num_conv_pos_embeddings=16,
    num_conv_pos_embedding_groups=2,
    do_stable_layer_norm=True,
    feat_extract_norm="layer",
    vocab_size=32,
)


@dataclass(frozen=True)
class Architecture:
    name: str
    variant: Variant  # what it takes, how a step runs, its experts (variants.py)
    transformer: TransformerConfig  # each expert's (the experts of a pair share every dimension)
    vae: VaeConfig
    text_encoder: dict  # transformers.UMT5Config fields
    boundary: float | None  # t ≥ boundary·1000 runs the high-noise expert (None with one expert)
    shift: float  # the flow shift the model was trained and is sampled with
    builtin: bool = False  # built in memory with random weights (builtin/tiny.py), never loaded
    image_encoder: dict | None = None  # transformers.CLIPVisionConfig fields (variant.image_features)
    audio_encoder: dict | None = None  # transformers.Wav2Vec2Config fields (S2V)


# Wan 2.2 (the official checkpoints' configs): A14B = dim 5120 = 40 heads × 128, FFN 13824, 40 layers, the
# Wan 2.1 VAE (z 16, ×8 spatial); TI2V-5B = dim 3072 = 24 × 128, FFN 14336, 30 layers, the Wan 2.2
# VAE (z 48, ×16 spatial). I2V concatenates a 4-channel mask and the 16-channel image latent to the
# noise (36 in: `Variant.in_channels`); 2.2 has no CLIP image branch.
_A14B = TransformerConfig()
_5B = TransformerConfig(num_attention_heads=24, ffn_dim=14336, num_layers=30)
# Animate-14B: the A14B DiT with Wan 2.1's image branch (CLIP ViT-H features, 1280 wide) and the
# motion and face encoders (diffusers' converter's config).
_ANIMATE_14B = dataclasses.replace(_A14B, image_dim=1280, added_kv_proj_dim=5120, animate=AnimateConfig())

# Tiny: 8 heads so Ulysses can split up to 8 ways; head_dim 16 still splits into the t/h/w RoPE
# parts 8/4/4; two layers so a layer scan and a block loop both have something to iterate.
_TINY = TransformerConfig(
    num_attention_heads=8, attention_head_dim=16, ffn_dim=256, num_layers=2, text_dim=TINY_TEXT_DIM, freq_dim=32
)
# A 32² face crop (three halvings to 4 × 4), a face adapter after every second block (after block
# 0 of the two: a block without one is exercised too).
_TINY_ANIMATE = dataclasses.replace(
    _TINY,
    image_dim=TINY_CLIP["hidden_size"],
    added_kv_proj_dim=_TINY.dim,
    animate=AnimateConfig(
        motion_encoder_size=32,
        motion_style_dim=32,
        motion_dim=8,
        motion_encoder_dim=32,
        face_encoder_hidden_dim=32,
        face_encoder_num_heads=4,
        inject_face_latents_blocks=2,
        motion_encoder_channel_sizes=((4, 32), (8, 32), (16, 16), (32, 8)),
    ),
)
# S2V-14B: the A14B DiT over 16 latent channels (the reference image enters as tokens, not
# channels), with the pose condition, audio encoder and injectors, frame packer (official config).
_S2V_14B = dataclasses.replace(_A14B, s2v=S2VConfig())
# Audio injected after both tiny blocks; wav2vec2's width 16.
_TINY_S2V = dataclasses.replace(_TINY, s2v=S2VConfig(audio_dim=16, audio_inject_layers=(0, 1)))
# Narrow VAEs with the real structure (same stages, strides, causal caches).
_TINY_VAE_WAN21 = dataclasses.replace(VaeConfig.wan2_1(), base_dim=8, decoder_base_dim=None)
_TINY_VAE_WAN22 = dataclasses.replace(VaeConfig.wan2_2(), base_dim=8, decoder_base_dim=16)


def _arch(name, variant: Variant, transformer, vae: VaeConfig, *rest) -> Architecture:
    """The architecture with the transformer's channels its variant and VAE decide: the noise's
    latent channels out, those plus the variant's joined channels in."""
    channels = dataclasses.replace(transformer, in_channels=variant.in_channels(vae), out_channels=vae.z_dim)
    return Architecture(name, variant, channels, vae, *rest)


ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in (
        _arch("wan2.2_t2v_a14b", T2V, _A14B, VaeConfig.wan2_1(), UMT5_XXL, 0.875, 12.0),
        _arch("wan2.2_i2v_a14b", I2V, _A14B, VaeConfig.wan2_1(), UMT5_XXL, 0.900, 5.0),
        _arch("wan2.2_ti2v_5b", TI2V, _5B, VaeConfig.wan2_2(), UMT5_XXL, None, 5.0),
        _arch("wan2.2_animate_14b", ANIMATE, _ANIMATE_14B, VaeConfig.wan2_1(), UMT5_XXL, None, 5.0, False, CLIP_VIT_H),
        _arch("wan2.2_s2v_14b", S2V, _S2V_14B, VaeConfig.wan2_1(), UMT5_XXL, None, 3.0, False, None, WAV2VEC_LARGE),
        _arch("tiny", T2V, _TINY, _TINY_VAE_WAN21, TINY_UMT5, 0.875, 12.0, True),
        _arch("tiny_i2v", I2V, _TINY, _TINY_VAE_WAN21, TINY_UMT5, 0.900, 5.0, True),
        _arch("tiny_ti2v", TI2V, _TINY, _TINY_VAE_WAN22, TINY_UMT5, None, 5.0, True),
        _arch("tiny_animate", ANIMATE, _TINY_ANIMATE, _TINY_VAE_WAN21, TINY_UMT5, None, 5.0, True, TINY_CLIP),
        _arch("tiny_s2v", S2V, _TINY_S2V, _TINY_VAE_WAN21, TINY_UMT5, None, 3.0, True, None, TINY_WAV2VEC),
    )
}


def architecture(name: str) -> Architecture:
    if name not in ARCHITECTURES:
        raise KeyError(f"no architecture named {name!r}; known: {sorted(ARCHITECTURES)}")
    return ARCHITECTURES[name]
