"""The run's model architecture, from its preset or its checkpoint's configs (no weights read),
and the modules built on the meta device that give parameter names and shapes."""

from __future__ import annotations

import dataclasses
import math

from ..config import TASK_IN_CHANNELS, RunSpec

# Wan 2.2's text encoder, umt5-xxl (google/umt5-xxl config), run in bf16 on the main rank.
UMT5_XXL = dict(vocab_size=256384, d_model=4096, d_kv=64, num_heads=64, d_ff=10240, num_layers=24,
                feed_forward_proj="gated-gelu", tie_word_embeddings=False)
TEXT_LEN = 512



def architecture(spec: RunSpec):
    """(TransformerConfig, VaeConfig, UMT5Config) of the run's model: from checkpoint_dir's
    configs when given, else the preset's architecture (REFERENCE.md "Models")."""
    from transformers import UMT5Config

    from ..models.transformer_config import TransformerConfig
    from ..models.vae_config import VaeConfig

    task = spec.model.task
    if spec.checkpoint_dir is not None:
        from ..weights.layout import describe_checkpoint

        ckpt = describe_checkpoint(spec.checkpoint_dir)
        text = UMT5Config(**UMT5_XXL)
        if ckpt.text_encoder_format == "diffusers":
            text = UMT5Config.from_pretrained(str(ckpt.text_encoder_path))
        return next(iter(ckpt.transformers.values())), ckpt.vae_config, text
    if spec.model.builtin:
        from ..builtin import tiny

        vae = VaeConfig.wan2_2() if task == "ti2v" else VaeConfig.wan2_1()
        vae = dataclasses.replace(vae, **tiny._VAE_WIDTHS["wan2.2" if task == "ti2v" else "wan2.1"])
        text = UMT5Config(vocab_size=8 * math.ceil(len(tiny.build_tokenizer()) / 8), feed_forward_proj="gated-gelu",
                          tie_word_embeddings=False, **tiny._UMT5)
        return tiny.transformer_config(task), vae, text
    if task == "ti2v":  # TI2V-5B: dim 3072, ffn 14336, 24 heads, 30 layers; Wan 2.2 VAE
        tcfg = TransformerConfig(num_attention_heads=24, ffn_dim=14336, num_layers=30, in_channels=48, out_channels=48)
        return tcfg, VaeConfig.wan2_2(), UMT5Config(**UMT5_XXL)
    return TransformerConfig(in_channels=TASK_IN_CHANNELS[task]), VaeConfig.wan2_1(), UMT5Config(**UMT5_XXL)


def meta_module(build):
    import torch

    with torch.device("meta"):
        return build()


def transformer_shapes(tcfg) -> dict:
    """Diffusers name → shape of every parameter of one expert (the model built on the meta
    device: the names and shapes a checkpoint of this config holds)."""
    from diffusers import WanTransformer3DModel

    model = meta_module(lambda: WanTransformer3DModel(**tcfg.to_diffusers()))
    return {name: tuple(p.shape) for name, p in model.named_parameters()}
