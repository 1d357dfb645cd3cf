"""The parameters Animate-14B adds to the Wan DiT (transformer_shapes.py), by diffusers name, and
their shapes: the pose patch embedding, the motion encoder, the face encoder and the face
adapters (tests/unit/test_transformer.py holds them equal to diffusers'
WanAnimateTransformer3DModel built on the meta device)."""

from __future__ import annotations

from .animate_config import MOTION_BLOCKS
from .transformer_config import TransformerConfig


def animate_shapes(cfg: TransformerConfig) -> dict[str, tuple[int, ...]]:
    a, dim = cfg.animate, cfg.dim
    latent = cfg.out_channels
    shapes: dict[str, tuple[int, ...]] = {
        "pose_patch_embedding.weight": (dim, latent, *cfg.patch_size),
        "pose_patch_embedding.bias": (dim,),
    }
    m = "motion_encoder."
    shapes[m + "motion_synthesis_weight"] = (a.motion_encoder_dim, a.motion_dim)
    first = a.channels[a.motion_encoder_size]
    shapes[m + "conv_in.weight"], shapes[m + "conv_in.act_fn.bias"] = (first, 3, 1, 1), (first,)
    for i, (c_in, c_out) in enumerate(a.res_blocks):
        b = f"{m}res_blocks.{i}."
        shapes.update(
            {
                b + "conv1.weight": (c_in, c_in, 3, 3),
                b + "conv1.act_fn.bias": (c_in,),
                b + "conv2.weight": (c_out, c_in, 3, 3),
                b + "conv2.act_fn.bias": (c_out,),
                b + "conv_skip.weight": (c_out, c_in, 1, 1),
            }
        )
    last = a.res_blocks[-1][1] if a.res_blocks else first
    shapes[m + "conv_out.weight"] = (a.motion_style_dim, last, 4, 4)
    for i in range(MOTION_BLOCKS):
        out = a.motion_dim if i == MOTION_BLOCKS - 1 else a.motion_style_dim
        shapes[f"{m}motion_network.{i}.weight"] = (out, a.motion_style_dim)
        shapes[f"{m}motion_network.{i}.bias"] = (out,)
    f, hidden, heads = "face_encoder.", a.face_encoder_hidden_dim, a.face_encoder_num_heads
    shapes.update(
        {
            f + "padding_tokens": (1, 1, 1, dim),
            f + "conv1_local.weight": (hidden * heads, a.motion_encoder_dim, 3),
            f + "conv1_local.bias": (hidden * heads,),
            f + "conv2.weight": (hidden, hidden, 3),
            f + "conv2.bias": (hidden,),
            f + "conv3.weight": (hidden, hidden, 3),
            f + "conv3.bias": (hidden,),
            f + "out_proj.weight": (dim, hidden),
            f + "out_proj.bias": (dim,),
        }
    )
    for i in range(a.face_adapters(cfg.num_layers)):
        p = f"face_adapter.{i}."
        for proj in ("to_q", "to_k", "to_v", "to_out"):
            shapes[f"{p}{proj}.weight"], shapes[f"{p}{proj}.bias"] = (dim, dim), (dim,)
        shapes[p + "norm_q.weight"] = shapes[p + "norm_k.weight"] = (cfg.attention_head_dim,)
    return shapes
