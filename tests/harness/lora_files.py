"""Random LoRA files for tiny models, the same numbers written in each format users have:
diffusers/PEFT (adapter config in the header), ComfyUI/lightx2v (`diffusion_model.` prefix,
lora_down/lora_up, per-module `.alpha`) and musubi-tuner (`lora_unet_…`); and `bad_file`, LoRA files that
are wrong in one way each (with the words their refusal must hold)."""

from __future__ import annotations

import json

import torch
from safetensors.torch import save_file

from parallel_wan.builtin.tiny import transformer_config
from parallel_wan.weights.transformer_keymap import diffusers_to_official_name

BLOCK_MODULES = (
    "attn1.to_q",
    "attn1.to_k",
    "attn1.to_v",
    "attn1.to_out.0",
    "attn2.to_q",
    "attn2.to_k",
    "attn2.to_v",
    "attn2.to_out.0",
    "ffn.net.0.proj",
    "ffn.net.2",
)


def lora_pairs(cfg, rank: int = 4, seed: int = 0, std: float = 0.2, modules=BLOCK_MODULES) -> dict:
    """{diffusers module: (down (r, in), up (out, r))} for every block of `cfg`."""
    g = torch.Generator().manual_seed(seed)
    dim, ffn = cfg.dim, cfg.ffn_dim
    shapes = {"ffn.net.0.proj": (ffn, dim), "ffn.net.2": (dim, ffn)}
    out = {}
    for i in range(cfg.num_layers):
        for m in modules:
            o, n = shapes.get(m, (dim, dim))
            out[f"blocks.{i}.{m}"] = (
                torch.randn((rank, n), generator=g) * std,
                torch.randn((o, rank), generator=g) * std,
            )
    return out


def official(module: str) -> str:
    return diffusers_to_official_name(module + ".weight")[: -len(".weight")]


def write_lora(path, pairs: dict, fmt: str, alpha: float | None = None, extra: dict | None = None) -> str:
    """Write `pairs` in format `fmt` (peft | comfyui | musubi); alpha=None: no alpha (scale 1)."""
    tensors, metadata = {}, None
    for module, (down, up) in pairs.items():
        rank = down.shape[0]
        if fmt == "peft":
            tensors[f"transformer.{module}.lora_A.weight"] = down
            tensors[f"transformer.{module}.lora_B.weight"] = up
            if alpha is not None:  # what diffusers' save_lora_weights writes: the LoraConfig, keys prefixed
                config = {"r": rank, "lora_alpha": alpha, "target_modules": sorted(pairs)}
                metadata = {"lora_adapter_metadata": json.dumps({f"transformer.{k}": v for k, v in config.items()})}
        else:
            stem = (
                f"diffusion_model.{official(module)}"
                if fmt == "comfyui"
                else "lora_unet_" + official(module).replace(".", "_")
            )
            tensors[f"{stem}.lora_down.weight"] = down
            tensors[f"{stem}.lora_up.weight"] = up
            if alpha is not None:
                tensors[f"{stem}.alpha"] = torch.tensor(float(alpha))
    tensors.update(extra or {})
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata=metadata)
    return str(path)


# ---------------------------------------------------------------- bad input
def bad_file(tmp_path, kind):
    """A LoRA file that is wrong in one way; returns (path, words the error must hold)."""
    cfg = transformer_config("t2v")
    pairs = lora_pairs(cfg, rank=4, seed=6, modules=("attn1.to_q",))
    path = tmp_path / f"{kind}.safetensors"
    if kind == "not_safetensors":
        path = tmp_path / "lora.bin"
        path.write_bytes(b"\0" * 64)
        return path, ["not a .safetensors file"]
    if kind == "corrupt":
        path.write_bytes(b"\xff" * 64)
        return path, ["not a readable safetensors file"]
    if kind == "unknown_key":
        write_lora(
            path,
            pairs,
            "comfyui",
            extra={"diffusion_model.blocks.0.self_attn.zz.lora_down.weight": torch.zeros(4, cfg.dim)},
        )
        return path, ["blocks.0.self_attn.zz.lora_down.weight", "names no module"]
    if kind == "rank_mismatch":
        down, up = pairs["blocks.0.attn1.to_q"]
        write_lora(path, {"blocks.0.attn1.to_q": (down, up[:, :3])}, "comfyui")
        return path, ["rank mismatch", "blocks.0.attn1.to_q"]
    if kind == "shape_mismatch":  # a LoRA for a wider model (e.g. 5B on A14B)
        write_lora(path, {"blocks.0.attn1.to_q": (torch.zeros(4, 2 * cfg.dim), torch.zeros(2 * cfg.dim, 4))}, "peft")
        return path, ["blocks.0.attn1.to_q.weight is", "another model size"]
    if kind == "half_pair":
        down, _ = pairs["blocks.0.attn1.to_q"]
        save_file({f"diffusion_model.{official('blocks.0.attn1.to_q')}.lora_down.weight": down}, str(path))
        return path, ["no lora_B/lora_up partner"]
    if kind == "dora":
        write_lora(
            path,
            pairs,
            "peft",
            extra={"transformer.blocks.0.attn1.to_q.lora_magnitude_vector.dora_scale": torch.ones(cfg.dim)},
        )
        return path, ["DoRA"]
    if kind == "pickle_with_code":
        path = tmp_path / "lora.pth"
        import pickle

        path.write_bytes(pickle.dumps(print))
        return path, ["torch.load(weights_only=True)"]
    raise ValueError(kind)


def expert_lora_words(path, high: float, low: float) -> list[str]:
    """The command line's words for one LoRA file on both experts at their own strengths (what a
    server request's {"name", "scale_high", "scale_low"} becomes)."""
    return [f"lora_high={path}", f"lora_high_scale={high}", f"lora_low={path}", f"lora_low_scale={low}"]
