"""The shape of a UMT5 text encoder: transformers' UMT5Config fields that decide its tensors.
Plain data (no torch): the memory planner and the fit check size the encoder from it without
building one."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EncoderShape:
    vocab_size: int
    d_model: int
    d_kv: int
    num_heads: int
    d_ff: int
    num_layers: int
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    layer_norm_epsilon: float = 1e-6

    @classmethod
    def from_config(cls, fields: dict, where: str = "the text encoder's config") -> EncoderShape:
        """From UMT5Config fields (a diffusers text_encoder/config.json, or the official file's
        shapes); fields left out take UMT5Config's defaults (the dataclass's); anything but
        UMT5's gated tanh-GELU feed-forward is refused."""
        proj = fields.get("feed_forward_proj", "gated-gelu")
        if proj != "gated-gelu":
            raise ValueError(f"{where}: feed_forward_proj={proj!r}; the UMT5 encoder Wan uses is 'gated-gelu'")
        missing = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING and f.name not in fields]
        if missing:
            raise ValueError(f"{where}: no {missing[0]!r}; expected a UMT5 encoder config")
        return cls(**{f.name: fields[f.name] for f in dataclasses.fields(cls) if f.name in fields})

    @classmethod
    def from_config_file(cls, path: Path) -> EncoderShape:
        """From a diffusers text_encoder/config.json (already checked to be JSON by the layout)."""
        return cls.from_config(json.loads(path.read_text()), str(path))
