"""The `lora*` settings, checked before anything loads (no torch import):

    lora=PATH | [PATH, …]          every expert (TI2V-5B has one)      lora_scale=S | [S, …]
    lora_high=PATH | [PATH, …]     the high-noise expert (A14B)        lora_high_scale=…
    lora_low=PATH | [PATH, …]      the low-noise expert (A14B)         lora_low_scale=…

A scale is the strength: the LoRA's change is multiplied by it (1 = as trained; the Wan 2.1
lightx2v LoRA is often used at 3 on the high-noise expert and 1 on the low).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from ..errors import ConfigError
from ..models.experts import setting_roles

ROLES = setting_roles("lora")  # setting → the role of the expert it applies to (models/experts.py)
SAFETENSORS, PICKLED = (".safetensors",), (".pth", ".pt")


def lora_settings(cfg: Mapping, experts: int, model_name: str) -> tuple[tuple[str, str, float, str], ...]:
    """((role, path, scale, setting), …) with role all | high | low."""
    out = []
    for key, role in ROLES.items():
        paths = cfg.get(key)
        scales = cfg.get(f"{key}_scale", 1.0)
        if paths is None or paths == "" or paths == []:
            continue
        if role != "all" and experts == 1:
            raise ConfigError(
                f"{key}= applies to one expert of a two-expert model, but model={model_name} has one "
                f"model; use lora={paths if isinstance(paths, str) else list(paths)}"
            )
        paths = [paths] if isinstance(paths, str) else paths
        if not isinstance(paths, (list, tuple)) or not all(isinstance(p, str) and p for p in paths):
            raise ConfigError(
                f"{key}={paths!r} must be a path or a list of paths, e.g. {key}='[a.safetensors,b.safetensors]'"
            )
        scales = list(scales) if isinstance(scales, (list, tuple)) else [scales] * len(paths)
        if len(scales) != len(paths):
            raise ConfigError(
                f"{key}_scale has {len(scales)} values for {len(paths)} files in {key}; give one scale, or one per file"
            )
        for i, (path, scale) in enumerate(zip(paths, scales)):
            setting = key if len(paths) == 1 else f"{key}[{i}]"
            out.append((role, check_path(setting, path), _scale(f"{key}_scale", scale), setting))
    return tuple(out)


def check_path(setting: str, path: str) -> str:
    """The absolute path, or a ConfigError naming the setting: missing, a folder, or a file
    type we do not read."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.exists(path):
        raise ConfigError(f"{setting}={path} does not exist; give the LoRA's .safetensors file")
    if not os.path.isfile(path):
        raise ConfigError(f"{setting}={path} is a folder; give the LoRA's .safetensors file inside it")
    if not path.endswith(SAFETENSORS + PICKLED):
        raise ConfigError(
            f"{setting}={path} is not a .safetensors file (nor a .pth read with weights_only=True); "
            "convert the LoRA to safetensors"
        )
    return path


def _scale(key: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{key}={value!r} is not a number; set e.g. {key}=1.0")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{key}={value} must be a finite number ≥ 0 (the LoRA's strength; 1.0 as trained)")
    return value


def expert_sources(loras, expert_role: str) -> list[tuple[str, float, str]]:
    """(path, scale, setting) of the files for the expert whose role is high or low (a
    one-expert model's is "all": only `lora=` applies to it)."""
    return [(path, scale, setting) for role, path, scale, setting in loras if role in ("all", expert_role)]
