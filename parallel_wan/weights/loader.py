"""Transformer experts and the VAE as param trees under diffusers names, from either layout.

The official layout's names are mapped while reading (one pass, one copy per tensor), so the
rest of the program never sees them. The text encoder is a transformers module and loads in
`parallel_wan/text/umt5.py`.
"""

from __future__ import annotations

from pathlib import Path

from parallel_wan.models.vae_config import VaeConfig
from parallel_wan.weights import transformer_keymap, tree, vae_keymap
from parallel_wan.weights.layout import Checkpoint, describe_checkpoint
from parallel_wan.weights.safetensors_io import KeepFp32, cast, load_pth_mapped, read_safetensors, torch_dtype

def load_transformer(
    checkpoint: Checkpoint | str | Path,
    expert: str,
    dtype: str = "bfloat16",
    keep_fp32: KeepFp32 | None = None,
) -> dict:
    """One expert's params tree: "high_noise" / "low_noise" (A14B) or "single" (TI2V-5B).

    keep_fp32(diffusers_name) → True keeps that tensor in float32 whatever `dtype` is (the model
    layer owns that policy: `parallel_wan.models.transformer.keeps_fp32`).
    """
    checkpoint = _as_checkpoint(checkpoint)
    if expert not in checkpoint.experts:
        raise ValueError(
            f"expert={expert!r} is not in the checkpoint at {checkpoint.root}; it has "
            f"{', '.join(checkpoint.experts)}"
        )
    rename = transformer_keymap.official_to_diffusers_name if checkpoint.layout == "official" else None
    flat = read_safetensors(checkpoint.experts[expert], dtype=dtype, keep_fp32=keep_fp32, rename=rename)
    return tree.unflatten(flat)


def load_vae(checkpoint: Checkpoint | str | Path, dtype: str = "float32") -> tuple[VaeConfig, dict]:
    """The VAE's config and params tree (diffusers names). The VAE runs in fp32 by default:
    its decode is a small share of the time and the reference decodes in fp32."""
    checkpoint = _as_checkpoint(checkpoint)
    if checkpoint.layout == "diffusers":
        flat = read_safetensors(checkpoint.vae_path, dtype=dtype)
    else:
        target = torch_dtype(dtype)
        mapped = vae_keymap.official_to_diffusers(load_pth_mapped(checkpoint.vae_path), checkpoint.vae_kind)
        flat = {name: cast(tensor, name, target, None) for name, tensor in mapped.items()}
    return checkpoint.vae_config, tree.unflatten(flat)


def _as_checkpoint(checkpoint: Checkpoint | str | Path) -> Checkpoint:
    return checkpoint if isinstance(checkpoint, Checkpoint) else describe_checkpoint(checkpoint)
