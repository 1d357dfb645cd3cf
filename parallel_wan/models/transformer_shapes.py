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
    for name in [n for n in shapes if n.endswith(".weight") and n != "patch_embedding.weight"]:
        shapes[name[: -len("weight")] + "bias"] = shapes[name][:1]
    block: dict[str, tuple[int, ...]] = {"scale_shift_table": (1, 6, dim)}
    for attn in ("attn1", "attn2"):
        for proj in ("to_q", "to_k", "to_v", "to_out.0"):
            block[f"{attn}.{proj}.weight"], block[f"{attn}.{proj}.bias"] = (dim, dim), (dim,)
        if cfg.qk_norm:
            block[f"{attn}.norm_q.weight"] = block[f"{attn}.norm_k.weight"] = (dim,)
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
    return shapes
