"""The official Animate-14B's CLIP file (`models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth`,
open-clip's XLM-RoBERTa-large + ViT-H/14 as the official `wan/modules/animate/clip.py` builds it)
↔ transformers' `CLIPVisionModel`, the tower diffusers' Animate checkpoint carries.

Only the vision tower is read (`visual.*`; the text tower, `log_scale` and the projection head
are never used: Animate reads the penultimate layer's hidden states). Its layers map one to
one but for the attention's fused `to_qkv` (q, k, v stacked by rows), split here, and the class
and position embeddings, stored with leading unit axes. The file has no config: the widths come
from the tensors' shapes, the head count from the official code, which builds ViT-H/14 with 16
heads whatever the width (so a smaller file written in this layout, the tiny model's, has 16).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

HEADS = 16  # the official clip_xlm_roberta_vit_h_14's vision heads
_LAYER = re.compile(r"^visual\.transformer\.(\d+)\.(.+)$")
_IN_LAYER = {
    "norm1": "layer_norm1",
    "attn.proj": "self_attn.out_proj",
    "norm2": "layer_norm2",
    "mlp.0": "mlp.fc1",
    "mlp.2": "mlp.fc2",
}
_TOP = {"visual.pre_norm": "pre_layrnorm", "visual.post_norm": "post_layernorm"}


def vision_config(shapes: Mapping[str, tuple]) -> dict:
    """CLIPVisionConfig's fields for the vision tower with these official tensor shapes."""
    hidden, _, patch, _ = shapes["visual.patch_embedding.weight"]
    positions = shapes["visual.pos_embedding"][1]
    side = round((positions - 1) ** 0.5)
    if side * side + 1 != positions:
        raise ValueError(f"visual.pos_embedding has {positions} positions; a square image's patches and a class token")
    layers = 1 + max(int(m.group(1)) for n in shapes if (m := _LAYER.match(n)))
    if hidden % HEADS:
        raise ValueError(f"the vision tower's width {hidden} does not split into the official {HEADS} heads")
    return dict(
        hidden_size=hidden,
        intermediate_size=shapes["visual.transformer.0.mlp.0.weight"][0],
        num_hidden_layers=layers,
        num_attention_heads=HEADS,
        patch_size=patch,
        image_size=side * patch,
        hidden_act="gelu",  # open-clip's ViT-H/14: exact GELU
        layer_norm_eps=1e-5,
        projection_dim=shapes["visual.head"][1] if "visual.head" in shapes else 1024,
    )


def to_transformers(state: Mapping) -> dict:
    """The official file's vision tensors (torch) under transformers' CLIPVisionModel names."""
    out = {}
    for name, tensor in state.items():
        if not name.startswith("visual.") or name == "visual.head":
            continue  # the text tower, log_scale and the projection: never read
        if name == "visual.patch_embedding.weight":
            out["embeddings.patch_embedding.weight"] = tensor
        elif name == "visual.cls_embedding":
            out["embeddings.class_embedding"] = tensor.reshape(-1)
        elif name == "visual.pos_embedding":
            out["embeddings.position_embedding.weight"] = tensor.reshape(tensor.shape[-2:])
        elif (top := name.rpartition(".")[0]) in _TOP:
            out[f"{_TOP[top]}.{name.rpartition('.')[2]}"] = tensor
        elif m := _LAYER.match(name):
            index, rest = m.groups()
            module, _, leaf = rest.rpartition(".")
            prefix = f"encoder.layers.{index}."
            if module == "attn.to_qkv":
                for part, chunk in zip(("q", "k", "v"), tensor.chunk(3, dim=0)):
                    out[f"{prefix}self_attn.{part}_proj.{leaf}"] = chunk
            elif module in _IN_LAYER:
                out[f"{prefix}{_IN_LAYER[module]}.{leaf}"] = tensor
            else:
                raise KeyError(f"{name}: not a tensor of the official ViT-H/14 vision tower")
        else:
            raise KeyError(f"{name}: not a tensor of the official ViT-H/14 vision tower")
    return out


def to_official(state: Mapping) -> dict:
    """transformers' CLIPVisionModel tensors (torch) as the official file holds them (its
    vision tower; the built-in tiny model's official layout)."""
    import torch

    state = {name.removeprefix("vision_model."): tensor for name, tensor in state.items()}  # transformers 4's names
    inverse = {v: k for k, v in _IN_LAYER.items()} | {v: k for k, v in _TOP.items()}
    out = {}
    for name, tensor in state.items():
        if name == "embeddings.patch_embedding.weight":
            out["visual.patch_embedding.weight"] = tensor
        elif name == "embeddings.class_embedding":
            out["visual.cls_embedding"] = tensor.reshape(1, 1, -1)
        elif name == "embeddings.position_embedding.weight":
            out["visual.pos_embedding"] = tensor.unsqueeze(0)
        elif m := re.match(r"^encoder\.layers\.(\d+)\.(.+)\.(weight|bias)$", name):
            index, module, leaf = m.groups()
            if module == "self_attn.q_proj":
                parts = [state[name.replace(".q_proj.", f".{p}_proj.")] for p in "qkv"]
                out[f"visual.transformer.{index}.attn.to_qkv.{leaf}"] = torch.cat(parts)
            elif module in inverse:
                out[f"visual.transformer.{index}.{inverse[module]}.{leaf}"] = tensor
        elif (top := name.rpartition(".")[0]) in inverse:
            out[f"{inverse[top]}.{name.rpartition('.')[2]}"] = tensor
    return out
