"""Animate-14B's config (models/animate_config.py, TransformerConfig.animate): read from a diffusers
config.json as diffusers writes it, refused when no reference could run it, and the architectures
of the registry that use it."""

from __future__ import annotations

import json

import pytest

from parallel_wan.models.animate_config import DEFAULT_CHANNELS, AnimateConfig
from parallel_wan.models.known_architecture import identify
from parallel_wan.models.registry import ARCHITECTURES
from parallel_wan.models.transformer_config import ANIMATE_CLASS, TransformerConfig
from parallel_wan.models.variants import ANIMATE, FORWARD_INPUT, IMAGE, POSE_VIDEO

# What diffusers' converter writes for Wan-AI/Wan2.2-Animate-14B-Diffusers (scripts/convert_wan_to_diffusers.py)
CONVERTED_14B = {
    "_class_name": ANIMATE_CLASS,
    "image_dim": 1280,
    "added_kv_proj_dim": 5120,
    "attention_head_dim": 128,
    "cross_attn_norm": True,
    "eps": 1e-06,
    "ffn_dim": 13824,
    "freq_dim": 256,
    "in_channels": 36,
    "latent_channels": 16,
    "num_attention_heads": 40,
    "num_layers": 40,
    "out_channels": 16,
    "patch_size": [1, 2, 2],
    "qk_norm": "rms_norm_across_heads",
    "text_dim": 4096,
    "rope_max_seq_len": 1024,
    "pos_embed_seq_len": None,
    "motion_encoder_channel_sizes": None,
    "motion_encoder_size": 512,
    "motion_style_dim": 512,
    "motion_dim": 20,
    "motion_encoder_dim": 512,
    "face_encoder_hidden_dim": 1024,
    "face_encoder_num_heads": 4,
    "inject_face_latents_blocks": 5,
    "motion_encoder_batch_size": 8,
}


def test_the_converted_14b_config_is_the_registrys_animate_architecture():
    cfg = TransformerConfig.from_diffusers(json.loads(json.dumps(CONVERTED_14B)))
    arch = ARCHITECTURES["wan2.2_animate_14b"]
    assert cfg == arch.transformer and cfg.animate == AnimateConfig()
    assert identify(cfg, arch.vae) == "wan2.2_animate_14b"  # not I2V-A14B, which has the same widths
    assert [c for _, c in cfg.animate.res_blocks] == [64, 128, 256, 512, 512, 512, 512]  # 512² → 4² in 7 halvings
    assert cfg.animate.face_adapters(cfg.num_layers) == 8


def test_in_channels_may_be_given_as_latent_channels():
    cfg = dict(CONVERTED_14B, in_channels=None)
    assert TransformerConfig.from_diffusers(cfg).in_channels == 36


@pytest.mark.parametrize(
    "change, message",
    [
        ({"image_dim": None}, "needs its image branch"),
        ({"added_kv_proj_dim": None}, "needs its image branch"),
        ({"pos_embed_seq_len": 514}, "pos_embed_seq_len=514"),
        ({"inject_face_latents_blocks": 3}, "inject_face_latents_blocks=3 must divide num_layers=40"),
        ({"motion_encoder_size": 96}, "motion_encoder_size=96: must be a power of two"),
        (
            {"motion_encoder_channel_sizes": {"4": 8, "8": 8}, "motion_encoder_size": 32},
            r"no entry for sizes \[16, 32\]",
        ),
    ],
)
def test_an_animate_config_no_reference_runs_is_refused(change, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig.from_diffusers({**CONVERTED_14B, **change})


def test_a_wan21_image_branch_is_still_refused():
    plain = {k: v for k, v in CONVERTED_14B.items() if not k.startswith(("motion", "face", "inject", "_class"))}
    with pytest.raises(ValueError, match="that is Wan 2.1 I2V"):
        TransformerConfig.from_diffusers(plain)


def test_an_official_animate_config_is_read_with_its_tensors_shapes():
    """The official config.json names its class and no model_type, and holds none of the motion
    and face dimensions (the official class fixes them): they come from the tensors
    (tests/unit/test_animate_official_layout.py), never guessed."""
    official = {"_class_name": "WanAnimateModel", "in_dim": 36, "dim": 5120, "num_heads": 40, "use_img_emb": True}
    with pytest.raises(ValueError, match="read with its tensors' shapes"):
        TransformerConfig.from_official(official)


def test_the_channel_table_round_trips_as_diffusers_writes_it():
    a = AnimateConfig(motion_encoder_size=16, motion_encoder_channel_sizes=((4, 8), (8, 8), (16, 4)))
    written = json.loads(json.dumps(a.to_diffusers()))
    assert written["motion_encoder_channel_sizes"] == {"4": 8, "8": 8, "16": 4}
    assert AnimateConfig.from_diffusers(written) == a
    assert AnimateConfig().channels == dict(DEFAULT_CHANNELS)


def test_the_animate_variant_takes_its_inputs_as_diffusers_names_them():
    assert ANIMATE.input(IMAGE).required and ANIMATE.image_features
    assert ANIMATE.input(POSE_VIDEO).enters == FORWARD_INPUT
    assert {i.name for i in ANIMATE.inputs} == {"image", "pose_video", "face_video", "background_video", "mask_video"}
    assert ARCHITECTURES["tiny_animate"].transformer.in_channels == 36  # noise 16 + mask 4 + reference 16
