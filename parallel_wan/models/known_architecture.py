"""Which architecture of the registry a checkpoint's configs describe. A preset names its own
(`architecture`); with weights the checkpoint's configs win (weights/layout.py reads them) and the
preset gives only the run's defaults (steps, size, frames, guidance, shift, boundary), so a preset
of another model runs whatever the checkpoint holds; the log and the sidecar name both.

Plain data (no torch, no jax), like the registry. Kept out of registry.py: that file's bytes are
part of the built-in model's store key (builtin/stored.py), which this must not change.
"""

from __future__ import annotations

from .registry import ARCHITECTURES
from .transformer_config import TransformerConfig
from .vae_config import VaeConfig


def dimensions(transformer: TransformerConfig, vae: VaeConfig) -> dict:
    """What tells the architectures apart: the DiT's widths and depth, its in/out latent
    channels and text width, and the VAE's latent channels (the fields a checkpoint's config
    states in both layouts; not the VAE's internal widths, which the official layout infers)."""
    return {
        "dim": transformer.dim,
        "num_layers": transformer.num_layers,
        "num_attention_heads": transformer.num_attention_heads,
        "ffn_dim": transformer.ffn_dim,
        "in_channels": transformer.in_channels,
        "out_channels": transformer.out_channels,
        "text_dim": transformer.text_dim,
        "freq_dim": transformer.freq_dim,
        "patch_size": tuple(transformer.patch_size),
        "vae_z_dim": vae.z_dim,
        "animate": transformer.animate is not None,  # Animate-14B has I2V-A14B's widths
        "s2v": transformer.s2v is not None,  # S2V-14B has T2V-A14B's widths
    }


def identify(transformer: TransformerConfig, vae: VaeConfig) -> str | None:
    """The name of the registry's architecture with these dimensions, or None (a model the
    registry does not list: a pruned or widened fine-tune, another family)."""
    mine = dimensions(transformer, vae)
    for arch in ARCHITECTURES.values():
        if dimensions(arch.transformer, arch.vae) == mine:
            return arch.name
    return None


def described(transformer: TransformerConfig, vae: VaeConfig) -> str:
    """`dim 5120, 40 layers, 40 heads, FFN 13824, VAE z 16` — what a log line says."""
    return (
        f"dim {transformer.dim}, {transformer.num_layers} layers, {transformer.num_attention_heads} heads, "
        f"FFN {transformer.ffn_dim}, VAE z {vae.z_dim}"
    )
