"""UMT5 encoder parameter names: official (`wan/modules/t5.py` T5Encoder, umt5 variant) ↔
transformers' `UMT5EncoderModel`.

The umt5 variant gives every block its own relative-position table (`shared_pos=False`), which
transformers keeps inside each block's self-attention; its gated-GELU FFN is `fc1(x) * gelu(gate(x))`
officially and `wi_1(x) * gelu(wi_0(x))` in transformers. Both use the tanh GELU, no attention
scaling and an RMS norm without bias, so the two are the same network under these names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeVar

T = TypeVar("T")

_TOP = [
    # (official, transformers)
    ("token_embedding.weight", "shared.weight"),
    ("norm.weight", "encoder.final_layer_norm.weight"),
]

_BLOCK = [
    ("norm1.weight", "layer.0.layer_norm.weight"),
    *[(f"attn.{p}.weight", f"layer.0.SelfAttention.{p}.weight") for p in "qkvo"],
    ("pos_embedding.embedding.weight", "layer.0.SelfAttention.relative_attention_bias.weight"),
    ("norm2.weight", "layer.1.layer_norm.weight"),
    ("ffn.gate.0.weight", "layer.1.DenseReluDense.wi_0.weight"),
    ("ffn.fc1.weight", "layer.1.DenseReluDense.wi_1.weight"),
    ("ffn.fc2.weight", "layer.1.DenseReluDense.wo.weight"),
]

# transformers ties the encoder's own embedding to `shared`; checkpoints may store both.
_TIED_EMBEDDING = "encoder.embed_tokens.weight"

_BLOCK_NAME = (re.compile(r"^blocks\.(\d+)\.(.+)$"), re.compile(r"^encoder\.block\.(\d+)\.(.+)$"))
_BLOCK_PREFIX = ("blocks.{}.", "encoder.block.{}.")


def _translate(name: str, src: int) -> str:
    for row in _TOP:
        if name == row[src]:
            return row[1 - src]
    block = _BLOCK_NAME[src].match(name)
    if block:
        for row in _BLOCK:
            if block.group(2) == row[src]:
                return _BLOCK_PREFIX[1 - src].format(block.group(1)) + row[1 - src]
    side = ("official T5Encoder", "transformers UMT5EncoderModel")[src]
    raise KeyError(f"text encoder parameter {name!r} is not a {side} name of the UMT5 encoder")


def official_to_transformers_name(name: str) -> str:
    return _translate(name, 0)


def transformers_to_official_name(name: str) -> str:
    return _translate(name, 1)


def official_to_transformers(state_dict: Mapping[str, T]) -> dict[str, T]:
    return {official_to_transformers_name(k): v for k, v in state_dict.items()}


def transformers_to_official(state_dict: Mapping[str, T]) -> dict[str, T]:
    # the tied copy adds nothing; the official file holds the table once
    return {transformers_to_official_name(k): v for k, v in state_dict.items() if k != _TIED_EMBEDDING}


def umt5_config_from_official(shapes: Mapping[str, tuple[int, ...]]) -> dict:
    """UMT5Config fields implied by the official tensors' shapes.

    The official file carries no config; the shapes fix every size. The rest are the values
    `wan/modules/t5.py` hard-codes for umt5-xxl (max relative distance 128, eps 1e-6,
    tanh-GELU gated FFN).
    """
    try:
        vocab, d_model = shapes["token_embedding.weight"]
        num_buckets, num_heads = shapes["blocks.0.pos_embedding.embedding.weight"]
        inner = shapes["blocks.0.attn.q.weight"][0]
        d_ff = shapes["blocks.0.ffn.fc1.weight"][0]
    except KeyError as e:
        raise KeyError(
            f"official T5 weights lack {e.args[0]!r}; expected the umt5 encoder of wan/modules/t5.py"
        ) from None
    layers = {int(m.group(1)) for name in shapes if (m := _BLOCK_NAME[0].match(name))}
    return dict(
        vocab_size=int(vocab),
        d_model=int(d_model),
        d_kv=int(inner) // int(num_heads),
        d_ff=int(d_ff),
        num_heads=int(num_heads),
        num_layers=len(layers),
        num_decoder_layers=len(layers),
        relative_attention_num_buckets=int(num_buckets),
        relative_attention_max_distance=128,
        feed_forward_proj="gated-gelu",
        layer_norm_epsilon=1e-6,
        dropout_rate=0.0,
        tie_word_embeddings=False,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
