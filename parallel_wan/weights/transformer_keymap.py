"""Wan 2.2 DiT parameter names: official (`wan/modules/model.py` WanModel) ↔ diffusers.

One table, read in both directions. Each row maps a module path; the parameter leaf
(".weight", ".bias") rides along unchanged, and a row may also name a bare parameter
(`modulation`). A name no row covers is an error, not a pass-through: a silently unmapped
tensor would load as a missing weight much later.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeVar

T = TypeVar("T")

_TOP = [
    # (official, diffusers)
    ("patch_embedding", "patch_embedding"),
    ("text_embedding.0", "condition_embedder.text_embedder.linear_1"),
    ("text_embedding.2", "condition_embedder.text_embedder.linear_2"),
    ("time_embedding.0", "condition_embedder.time_embedder.linear_1"),
    ("time_embedding.2", "condition_embedder.time_embedder.linear_2"),
    ("time_projection.1", "condition_embedder.time_proj"),
    ("head.head", "proj_out"),
    # the head's (1, 2, dim) table is a top-level parameter in diffusers
    ("head.modulation", "scale_shift_table"),
    # Animate-14B's image branch and pose embedding (pure renames; its motion encoder's
    # convolutions and the face adapters' fused k/v change shape, which a name table cannot say)
    ("img_emb.proj.0", "condition_embedder.image_embedder.norm1"),
    ("img_emb.proj.1", "condition_embedder.image_embedder.ff.net.0.proj"),
    ("img_emb.proj.3", "condition_embedder.image_embedder.ff.net.2"),
    ("img_emb.proj.4", "condition_embedder.image_embedder.norm2"),
    ("pose_patch_embedding", "pose_patch_embedding"),
    # S2V-14B's additions keep their official names (there is no diffusers S2V model)
    ("cond_encoder", "cond_encoder"),
    ("trainable_cond_mask", "trainable_cond_mask"),
    ("casual_audio_encoder", "casual_audio_encoder"),
    ("audio_injector", "audio_injector"),
    ("frame_packer", "frame_packer"),
]

_BLOCK = [
    *[
        (f"{official}.{a}", f"{diffusers}.{b}")
        for official, diffusers in (("self_attn", "attn1"), ("cross_attn", "attn2"))
        for a, b in (
            ("q", "to_q"),
            ("k", "to_k"),
            ("v", "to_v"),
            ("o", "to_out.0"),
            ("norm_q", "norm_q"),
            ("norm_k", "norm_k"),
        )
    ],
    ("norm1", "norm1"),
    # Official norm3 is the affine norm before cross-attention and norm2 the (parameterless)
    # one before the FFN; diffusers numbers them in the order they run.
    ("norm3", "norm2"),
    ("norm2", "norm3"),
    ("ffn.0", "ffn.net.0.proj"),
    ("ffn.2", "ffn.net.2"),
    ("modulation", "scale_shift_table"),
    # the image tokens' keys and values (Animate-14B; Wan 2.1 I2V's names)
    ("cross_attn.k_img", "attn2.add_k_proj"),
    ("cross_attn.v_img", "attn2.add_v_proj"),
    ("cross_attn.norm_k_img", "attn2.norm_added_k"),
]

_BLOCK_NAME = re.compile(r"^blocks\.(\d+)\.(.+)$")


def _translate(name: str, src: int, what: str) -> str:
    block = _BLOCK_NAME.match(name)
    prefix, rest = (f"blocks.{block.group(1)}.", block.group(2)) if block else ("", name)
    table = _BLOCK if block else _TOP
    for row in table:
        old, new = row[src], row[1 - src]
        if rest == old:
            return prefix + new
        if rest.startswith(old + "."):
            return prefix + new + rest[len(old) :]
    raise KeyError(
        f"transformer parameter {name!r} has no {what} name; this is not a Wan 2.2 T2V/I2V/TI2V "
        "transformer (Wan 2.1 I2V image branches and other variants are not supported)"
    )


def official_to_diffusers_name(name: str) -> str:
    return _translate(name, 0, "diffusers")


def diffusers_to_official_name(name: str) -> str:
    from .animate_keymap import diffusers_to_official_name as animate_name, is_animate_name

    return animate_name(name) if is_animate_name(name) else _translate(name, 1, "official")


def official_sources(infos: Mapping[str, T]) -> dict[str, T]:
    """Diffusers name → stored tensor (safetensors_header.TensorInfo) of an official transformer
    folder's index, in its order: the DiT's renamed, Animate's motion encoder, face encoder and
    face adapters as views of their stored bytes (animate_keymap.py: split, reshaped, blur
    kernels left out). Raises KeyError naming a tensor no rule covers."""
    from .animate_keymap import is_animate_name, official_views

    animate = official_views({name: info for name, info in infos.items() if is_animate_name(name)})
    out = {}
    for name, info in infos.items():
        if is_animate_name(name):
            out.update(animate[name])
        else:
            out[official_to_diffusers_name(name)] = info
    return out


def official_to_diffusers(state_dict: Mapping[str, T]) -> dict[str, T]:
    return {official_to_diffusers_name(k): v for k, v in state_dict.items()}


def diffusers_to_official(state_dict: Mapping[str, T]) -> dict[str, T]:
    return {diffusers_to_official_name(k): v for k, v in state_dict.items()}
