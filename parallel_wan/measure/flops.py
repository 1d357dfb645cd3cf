"""Analytic FLOP count of one DiT forward, as one rank computes it.

Counted: every matrix product, at 2 FLOPs per multiply-add (the convention MFU figures use).
Not counted: norms, RoPE, softmax, GELU, modulation and casts — O(tokens · dim) against the
O(tokens · dim²) and O(tokens² · dim) products, under 1 % at the real sizes.

A rank of a sequence-parallel mesh projects its own `tokens` (Lc, padding included) and its
queries meet every one of the `key_tokens` valid keys in self-attention, whatever the scheme:
Ulysses gives it U·Lc queries of H/U heads, the ring Lc queries of H heads in R blocks — the
same Lc·H query rows either way. So per rank, per row (sequence) of the batch:

    self q/k/v        2 · Lc · dim · 3·dim
    self scores (QKᵀ) 2 · Lc · N · dim         (all heads: H · D = dim)
    self values (PV)  2 · Lc · N · dim
    self out          2 · Lc · dim · dim
    cross q, out      2 · Lc · dim · dim each
    cross k/v         2 · C · dim · 2·dim       (C = text tokens, 512; recomputed every layer)
    cross scores, PV  2 · Lc · C · dim each
    ffn               2 · Lc · dim · ffn · 2
outside the layers: patch embedding, timestep and text embedders, output head.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..models.transformer_config import TransformerConfig

ATTENTION_PARTS = ("self_scores", "self_values", "cross_scores", "cross_values")


@dataclass(frozen=True)
class ForwardFlops:
    per_layer: dict  # part name → FLOPs of one transformer layer
    outside: dict  # patch_embed, time_embed, text_embed, head → FLOPs once per forward
    layers: int

    @property
    def layer(self) -> int:
        return sum(self.per_layer.values())

    @property
    def layer_attention(self) -> int:
        """The attention products (QKᵀ and PV) of one layer, self and cross."""
        return sum(self.per_layer[p] for p in ATTENTION_PARTS)

    @property
    def layer_self_attention(self) -> int:
        """Self-attention's QKᵀ and PV products: ≈72 % of a 720p A14B layer (4.68 of 6.52 PFLOP a forward)."""
        return self.per_layer["self_scores"] + self.per_layer["self_values"]

    @property
    def total(self) -> int:
        return self.layers * self.layer + sum(self.outside.values())

    def with_layers(self, layers: int) -> ForwardFlops:
        return ForwardFlops(self.per_layer, self.outside, layers)


def forward_flops(
    cfg: TransformerConfig,
    tokens: int,
    rows: int = 1,
    key_tokens: int | None = None,
    context_tokens: int | None = None,
    layers: int | None = None,
    per_token_timestep: bool = False,
) -> ForwardFlops:
    """FLOPs of one forward on `rows` sequences of `tokens` tokens each (a rank's Lc).

    key_tokens: the valid keys each query attends to (N, the whole sequence); defaults to
    `tokens` (one device). context_tokens: text length (cfg.text_len). layers: cfg.num_layers.
    per_token_timestep: TI2V-5B embeds a timestep per token instead of per row.
    """
    n = tokens if key_tokens is None else key_tokens
    c = cfg.text_len if context_tokens is None else context_tokens
    d, f, lc = cfg.dim, cfg.ffn_dim, tokens
    mm = lambda m, k, n_out: 2 * m * k * n_out  # noqa: E731 — (m × k) · (k × n_out)
    per_row = {
        "self_qkv": mm(lc, d, 3 * d),
        "self_scores": mm(lc, d, n),
        "self_values": mm(lc, n, d),
        "self_out": mm(lc, d, d),
        "cross_q": mm(lc, d, d),
        "cross_kv": mm(c, d, 2 * d),
        "cross_scores": mm(lc, d, c),
        "cross_values": mm(lc, c, d),
        "cross_out": mm(lc, d, d),
        "ffn": mm(lc, d, f) + mm(lc, f, d),
    }
    volume = math.prod(cfg.patch_size)
    timesteps = lc if per_token_timestep else 1
    outside_row = {
        "patch_embed": mm(lc, volume * cfg.in_channels, d),
        # time_embedder (freq → dim → dim), then time_proj (dim → 6·dim)
        "time_embed": timesteps * (mm(1, cfg.freq_dim, d) + mm(1, d, d) + mm(1, d, 6 * d)),
        "text_embed": mm(c, cfg.text_dim, d) + mm(c, d, d),
        "head": mm(lc, d, volume * cfg.out_channels),
    }
    return ForwardFlops(
        per_layer={k: rows * v for k, v in per_row.items()},
        outside={k: rows * v for k, v in outside_row.items()},
        layers=cfg.num_layers if layers is None else layers,
    )
