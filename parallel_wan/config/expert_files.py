"""The `weights*` settings: one safetensors file per expert replacing that expert's transformer
weights from checkpoint_dir (which still gives the VAE, text encoder, tokenizer and configs):

    weights_high=FILE weights_low=FILE      T2V-A14B and I2V-A14B (either or both)
    weights=FILE                            TI2V-5B (its one expert)

Typically a quantized expert users already have (Kijai's scaled fp8, ComfyUI's fp8/int8, LightX2V's
int8/fp8) or a bf16 single file; the file's format is read from its header when the checkpoint is
checked (weights/expert_file.py). Checked here, cheaply (no torch): the setting fits the model,
the file exists and starts like a safetensors file.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping

from ..errors import ConfigError
from ..models.experts import setting_roles

# setting → the expert's role (high, low, all = a one-expert model's: models/experts.py)
ROLES = setting_roles("weights")


def expert_file_settings(cfg: Mapping, experts: int, model_name: str) -> dict[str, str | None]:
    """{"weights": path|None, "weights_high": …, "weights_low": …}, paths absolute and checked."""
    out: dict[str, str | None] = {}
    for key, role in ROLES.items():
        value = cfg.get(key)
        if value is None or value == "":
            out[key] = None
            continue
        if not isinstance(value, str):
            raise ConfigError(f"{key}={value!r} must be the path of one .safetensors file")
        if role == "all" and experts == 2:
            raise ConfigError(
                f"{key}={value} names the one expert of TI2V-5B, but model={model_name} has two; "
                "use weights_high=FILE and/or weights_low=FILE"
            )
        if role != "all" and experts == 1:
            raise ConfigError(
                f"{key}={value} names one expert of a two-expert model, but model={model_name} has one; "
                f"use weights={value}"
            )
        out[key] = check_file(key, value)
    return out


def check_file(key: str, path: str) -> str:
    """The absolute path, or a ConfigError: missing, a folder, or not a safetensors file (the
    first 9 bytes: the header's length and the '{' its JSON opens with)."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.exists(path):
        raise ConfigError(f"{key}={path} does not exist; give the expert's .safetensors file")
    if not os.path.isfile(path):
        raise ConfigError(f"{key}={path} is a folder; give the expert's .safetensors file (one file per expert)")
    try:
        with open(path, "rb") as f:
            start = f.read(9)
            size = os.fstat(f.fileno()).st_size
    except OSError as e:
        raise ConfigError(f"{key}={path} cannot be read ({e.strerror})") from None
    if len(start) < 9 or start[8:9] != b"{" or struct.unpack("<Q", start[:8])[0] > size - 8:
        raise ConfigError(
            f"{key}={path} is not a safetensors file; give the expert as .safetensors "
            "(a .gguf or .pth expert is not read)"
        )
    return path
