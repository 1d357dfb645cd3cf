"""Wan2.2-Animate-14B's dimensions beyond the Wan DiT's: the motion encoder, the face encoder and
how often a face adapter follows a block. Field names and defaults follow diffusers'
`WanAnimateTransformer3DModel` config (the 14B values, as diffusers' converter writes them), so
a diffusers `config.json` reads and writes without a table.

The DiT part of an Animate transformer is a Wan DiT with an image branch (CLIP features through
`condition_embedder.image_embedder`, attended beside the text with `add_k_proj`/`add_v_proj`):
TransformerConfig's `image_dim` and `added_kv_proj_dim`, which only an Animate config may set.

Plain data (no torch, no jax).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

# The appearance encoder's channels per feature-map size (diffusers'
# WAN_ANIMATE_MOTION_ENCODER_CHANNEL_SIZES, the official encoder's): a size → channels table.
DEFAULT_CHANNELS = ((4, 512), (8, 512), (16, 512), (32, 512), (64, 256), (128, 128), (256, 64), (512, 32), (1024, 16))
MOTION_BLOCKS = 5  # linear layers from the style vector to the motion coefficients (fixed in both references)
CLIP_TOKENS = 257  # CLIP ViT-H/14 at 224²: 16 × 16 patches and the class token


@dataclass(frozen=True)
class AnimateConfig:
    motion_encoder_size: int = 512  # the face crops' side in pixels
    motion_style_dim: int = 512
    motion_dim: int = 20  # the motion basis's size
    motion_encoder_dim: int = 512  # a motion vector's width (the face encoder's input)
    face_encoder_hidden_dim: int = 1024
    face_encoder_num_heads: int = 4  # face tokens per latent frame, besides the padding token
    inject_face_latents_blocks: int = 5  # a face adapter after blocks 0, k, 2k, …
    # (size, channels) pairs; None: DEFAULT_CHANNELS. A tuple, so the config stays hashable.
    motion_encoder_channel_sizes: tuple[tuple[int, int], ...] | None = None

    @property
    def channels(self) -> dict[int, int]:
        return dict(self.motion_encoder_channel_sizes or DEFAULT_CHANNELS)

    @property
    def res_blocks(self) -> list[tuple[int, int]]:
        """The appearance encoder's residual blocks as (in, out) channels: one per halving from
        the crop's size down to 4 × 4."""
        channels, size = self.channels, self.motion_encoder_size
        blocks, c_in = [], channels[size]
        for i in range(int(math.log2(size)), 2, -1):
            blocks.append((c_in, channels[2 ** (i - 1)]))
            c_in = blocks[-1][1]
        return blocks

    def face_adapters(self, num_layers: int) -> int:
        return num_layers // self.inject_face_latents_blocks

    def check(self, num_layers: int) -> None:
        """Refuse what neither reference can run: a size that is not a power of two ≥ 8 or
        missing from the channel table, or a face adapter after a block that has none."""
        size = self.motion_encoder_size
        if size < 8 or size & (size - 1):
            raise ValueError(f"motion_encoder_size={size}: must be a power of two ≥ 8")
        missing = [2**i for i in range(2, int(math.log2(size)) + 1) if 2**i not in self.channels]
        if missing:
            raise ValueError(f"motion_encoder_channel_sizes has no entry for sizes {missing}")
        k = self.inject_face_latents_blocks
        if k < 1 or num_layers % k:
            raise ValueError(
                f"inject_face_latents_blocks={k} must divide num_layers={num_layers} "
                "(one face adapter after every k-th block)"
            )

    @classmethod
    def from_shapes(cls, shapes: dict, num_layers: int) -> AnimateConfig:
        """The dimensions of an official Animate-14B transformer, whose config.json has none of
        them (the official class fixes them in code): read from its tensors' shapes by diffusers
        name (weights/animate_keymap.py), as the official VAE's widths are. The 14B file gives
        the defaults; a smaller file written in that layout (the tiny model) its own."""
        m, f = "motion_encoder.", "face_encoder."
        blocks = sorted({int(n.split(".")[2]) for n in shapes if n.startswith(m + "res_blocks.")})
        size = 2 ** (len(blocks) + 2)  # one residual block per halving down to 4 × 4
        table = {size: shapes[m + "conv_in.weight"][0]}
        for i in blocks:
            table[size >> (i + 1)] = shapes[f"{m}res_blocks.{i}.conv2.weight"][0]
        default = dict(DEFAULT_CHANNELS)
        hidden = shapes[f + "conv2.weight"][0]
        adapters = len({n.split(".")[1] for n in shapes if n.startswith("face_adapter.")})
        return cls(
            motion_encoder_size=size,
            motion_style_dim=shapes[m + "conv_out.weight"][0],
            motion_dim=shapes[m + "motion_synthesis_weight"][1],
            motion_encoder_dim=shapes[m + "motion_synthesis_weight"][0],
            face_encoder_hidden_dim=hidden,
            face_encoder_num_heads=shapes[f + "conv1_local.weight"][0] // hidden,
            inject_face_latents_blocks=num_layers // max(adapters, 1),
            motion_encoder_channel_sizes=None
            if all(default.get(k) == v for k, v in table.items())
            else tuple(sorted(table.items())),
        )

    @classmethod
    def from_diffusers(cls, cfg: dict) -> AnimateConfig:
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in cfg.items() if k in known}
        if kwargs.get("motion_encoder_channel_sizes") is not None:
            table = kwargs["motion_encoder_channel_sizes"]
            kwargs["motion_encoder_channel_sizes"] = tuple(sorted((int(s), int(c)) for s, c in table.items()))
        return cls(**kwargs)

    def to_diffusers(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.motion_encoder_channel_sizes is not None:
            d["motion_encoder_channel_sizes"] = {str(s): c for s, c in self.motion_encoder_channel_sizes}
        return d


ANIMATE_KEYS = frozenset(f.name for f in fields(AnimateConfig))
