"""Architectures by name: every model this project runs, the real ones and the built-in tiny
ones side by side, so a model's dimensions are written down once.

The names are the model presets' names (`conf/model/<name>.yaml`, `name:`). A preset says how
to *run* a model (steps, size, guidance); an architecture says what the model *is* (layer
sizes, VAE, text encoder, experts). With a checkpoint the checkpoint's own configs win
(weights/layout.py reads them); the registry is what the planner, the benchmarks, early
validation and the tiny model's builder use when there are no weights to read.

Plain data (no torch, no jax): the text encoder is a dict of transformers' `UMT5Config`
fields, so this file can be imported by anything.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .transformer_config import TransformerConfig
from .vae_config import VaeConfig

TEXT_LEN = 512  # UMT5 tokens per prompt, the references' text_len

# UMT5-XXL encoder (google/umt5-xxl, as Wan ships it in bf16): transformers' UMT5Config fields.
UMT5_XXL = dict(
    vocab_size=256384,
    d_model=4096,
    d_kv=64,
    num_heads=64,
    d_ff=10240,
    num_layers=24,
    feed_forward_proj="gated-gelu",
    tie_word_embeddings=False,
)

# The tiny text encoder: vocab_size is left out on purpose, it follows the built-in tokenizer
# (builtin/tiny.py rounds the tokenizer's length up to a multiple of 8).
TINY_TEXT_DIM = 32
TINY_UMT5 = dict(
    d_model=TINY_TEXT_DIM,
    d_kv=8,
    num_heads=4,
    d_ff=64,
    num_layers=2,
    relative_attention_num_buckets=32,
    relative_attention_max_distance=128,
    feed_forward_proj="gated-gelu",
    tie_word_embeddings=False,
)


@dataclass(frozen=True)
class Architecture:
    name: str
    task: str  # "t2v" | "i2v" | "ti2v"
    transformer: TransformerConfig  # each expert's (the experts of a pair share every dimension)
    vae: VaeConfig
    text_encoder: dict  # transformers.UMT5Config fields
    experts: int  # 2: high-noise + low-noise expert (A14B); 1: one model (TI2V-5B)
    boundary: float | None  # t ≥ boundary·1000 runs the high-noise expert (None with one expert)
    shift: float  # the flow shift the model was trained and is sampled with
    builtin: bool = False  # built in memory with random weights (builtin/tiny.py), never loaded


# Wan 2.2 (REFERENCE.md "Models"): A14B = dim 5120 = 40 heads × 128, FFN 13824, 40 layers, the
# Wan 2.1 VAE (z 16, ×8 spatial); TI2V-5B = dim 3072 = 24 × 128, FFN 14336, 30 layers, the Wan 2.2
# VAE (z 48, ×16 spatial). I2V concatenates a 4-channel mask and the 16-channel image latent to the
# noise (36 in); 2.2 has no CLIP image branch.
_A14B = TransformerConfig()
_5B = TransformerConfig(num_attention_heads=24, ffn_dim=14336, num_layers=30, in_channels=48, out_channels=48)

# Tiny: 8 heads so Ulysses can split up to 8 ways; head_dim 16 still splits into the t/h/w RoPE
# parts 8/4/4; two layers so a layer scan and a block loop both have something to iterate.
_TINY = TransformerConfig(
    num_attention_heads=8, attention_head_dim=16, ffn_dim=256, num_layers=2, text_dim=TINY_TEXT_DIM, freq_dim=32
)
# Narrow VAEs with the real structure (same stages, strides, causal caches).
_TINY_VAE_WAN21 = dataclasses.replace(VaeConfig.wan2_1(), base_dim=8, decoder_base_dim=None)
_TINY_VAE_WAN22 = dataclasses.replace(VaeConfig.wan2_2(), base_dim=8, decoder_base_dim=16)


def _channels(cfg: TransformerConfig, inputs: int, outputs: int) -> TransformerConfig:
    return dataclasses.replace(cfg, in_channels=inputs, out_channels=outputs)


ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in (
        Architecture("wan2.2_t2v_a14b", "t2v", _A14B, VaeConfig.wan2_1(), UMT5_XXL, 2, 0.875, 12.0),
        Architecture("wan2.2_i2v_a14b", "i2v", _channels(_A14B, 36, 16), VaeConfig.wan2_1(), UMT5_XXL, 2, 0.900, 5.0),
        Architecture("wan2.2_ti2v_5b", "ti2v", _5B, VaeConfig.wan2_2(), UMT5_XXL, 1, None, 5.0),
        Architecture("tiny", "t2v", _channels(_TINY, 16, 16), _TINY_VAE_WAN21, TINY_UMT5, 2, 0.875, 12.0, True),
        Architecture("tiny_i2v", "i2v", _channels(_TINY, 36, 16), _TINY_VAE_WAN21, TINY_UMT5, 2, 0.900, 5.0, True),
        Architecture("tiny_ti2v", "ti2v", _channels(_TINY, 48, 48), _TINY_VAE_WAN22, TINY_UMT5, 1, None, 5.0, True),
    )
}


def architecture(name: str) -> Architecture:
    if name not in ARCHITECTURES:
        raise KeyError(f"no architecture named {name!r}; known: {sorted(ARCHITECTURES)}")
    return ARCHITECTURES[name]


def for_task(task: str, builtin: bool) -> Architecture:
    """The architecture a task runs when only the task is known (a preset of another name, e.g.
    a user's copy of a real preset): the real Wan 2.2 model of that task, or its tiny twin."""
    matches = [a for a in ARCHITECTURES.values() if a.task == task and a.builtin == builtin]
    if len(matches) != 1:
        raise KeyError(f"no single {'built-in' if builtin else 'real'} architecture for task {task!r}")
    return matches[0]
