"""The parameters the DiT of transformer.py reads, by diffusers name, and their shapes: the one
source for checking a checkpoint's tensors (weights/layout.py), a LoRA's pairs (lora/), the
planner's weight bytes and the ahead-of-time compiles' abstract weights. Pure arithmetic on
the config (tests/unit/test_transformer.py holds it equal to diffusers' WanTransformer3DModel built
on the meta device, for every architecture of the registry)."""

from __future__ import annotations

import math

from .transformer_config import TransformerConfig


def param_shapes(cfg: TransformerConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter of a Wan 2.2 DiT with this config (diffusers names), and its shape."""
    dim, ffn = cfg.dim, cfg.ffn_dim
    shapes: dict[str, tuple[int, ...]] = {
        "patch_embedding.weight": (dim, cfg.in_channels, *cfg.patch_size),
        "patch_embedding.bias": (dim,),
        "condition_embedder.time_embedder.linear_1.weight": (dim, cfg.freq_dim),
        "condition_embedder.time_embedder.linear_2.weight": (dim, dim),
        "condition_embedder.time_proj.weight": (6 * dim, dim),
        "condition_embedder.text_embedder.linear_1.weight": (dim, cfg.text_dim),
        "condition_embedder.text_embedder.linear_2.weight": (dim, dim),
        "proj_out.weight": (cfg.out_channels * math.prod(cfg.patch_size), dim),
        "scale_shift_table": (1, 2, dim),
    }
    if cfg.image_dim is not None:  # Animate's image branch: CLIP features to tokens (LayerNorm, MLP, LayerNorm)
        e = "condition_embedder.image_embedder."
        shapes[e + "ff.net.0.proj.weight"] = (cfg.image_dim, cfg.image_dim)
        shapes[e + "ff.net.2.weight"] = (dim, cfg.image_dim)
    for name in [n for n in shapes if n.endswith(".weight") and n != "patch_embedding.weight"]:
        shapes[name[: -len("weight")] + "bias"] = shapes[name][:1]
    if cfg.image_dim is not None:
        for norm, width in (("norm1", cfg.image_dim), ("norm2", dim)):
            shapes[f"{e}{norm}.weight"] = shapes[f"{e}{norm}.bias"] = (width,)
    block: dict[str, tuple[int, ...]] = {"scale_shift_table": (1, 6, dim)}
    for attn in ("attn1", "attn2"):
        for proj in ("to_q", "to_k", "to_v", "to_out.0"):
            block[f"{attn}.{proj}.weight"], block[f"{attn}.{proj}.bias"] = (dim, dim), (dim,)
        if cfg.qk_norm:
            block[f"{attn}.norm_q.weight"] = block[f"{attn}.norm_k.weight"] = (dim,)
    if cfg.added_kv_proj_dim is not None:  # the image tokens' keys and values beside the text's
        for proj in ("add_k_proj", "add_v_proj"):
            block[f"attn2.{proj}.weight"], block[f"attn2.{proj}.bias"] = (dim, cfg.added_kv_proj_dim), (dim,)
        block["attn2.norm_added_k.weight"] = (dim,)
    if cfg.cross_attn_norm:
        block["norm2.weight"] = block["norm2.bias"] = (dim,)
    block.update(
        {
            "ffn.net.0.proj.weight": (ffn, dim),
            "ffn.net.0.proj.bias": (ffn,),
            "ffn.net.2.weight": (dim, ffn),
            "ffn.net.2.bias": (dim,),
        }
    )
    for i in range(cfg.num_layers):
        shapes.update({f"blocks.{i}.{k}": v for k, v in block.items()})
    if cfg.animate is not None:
        from .animate_shapes import animate_shapes

        shapes.update(animate_shapes(cfg))
    if cfg.s2v is not None:
        from .s2v_shapes import s2v_shapes

        shapes.update(s2v_shapes(cfg))
    return shapes
