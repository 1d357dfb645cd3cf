"""LoRAs chosen per request: `lora_dir=FOLDER` registers every LoRA file in it at the server's
start, named by its file name without the extension (`style.safetensors` → `style`), each checked
against the model as the command line checks `lora=` files; a request names the ones it wants:

    "loras": [{"name": "style", "scale": 0.8}, {"name": "lightning_high", "scale_high": 1, "scale_low": 0}]

`scale` applies to both experts (one-expert models: the model), `scale_high` / `scale_low` set one
expert's strength (0 leaves that expert alone — Wan 2.2 LoRAs ship as high/low pairs, one file per
expert); vLLM-Omni's single `"lora": {"name", "scale"}` is read as a one-item list. The server
opens no path a client sends: only registered names.

A registered LoRA may carry a recipe — `NAME.json` beside it, with any of `recipe` (a named
few-step recipe: `lightning`), `steps`, `guidance_high`, `guidance_low`, `shift`, `sampler` —
laid under the request's own fields: a request naming the 4-step LoRA gets 4 steps unless it
says otherwise, so one server answers 4-step and 40-step requests.

The LoRAs fixed at start (`lora=`, `lora_high=`, `lora_low=`) apply to every request; a request's
come after them. How a job's LoRAs reach the weights: serve/worker.py."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

from ..errors import ConfigError
from ..lora.settings import ROLES
from .fields import RequestError, _shown

RECIPE_KEYS = ("recipe", "steps", "guidance_high", "guidance_low", "shift", "sampler")
MAX_LORAS = 4  # per request: each is a merge into every targeted layer at a switch
LORA_FILES = (".safetensors", ".pth", ".pt")


@dataclass(frozen=True)
class RegisteredLora:
    name: str
    path: str
    recipe: dict = field(default_factory=dict)

    def listing(self) -> dict:
        return {"name": self.name, "recipe": self.recipe or None}


def lora_registry(folder: str | None) -> dict[str, RegisteredLora]:
    """name → RegisteredLora of every LoRA file in `folder` (None: none registered); ConfigError
    for a folder that is not one, or a recipe that cannot be read."""
    if not folder:
        return {}
    folder = os.path.abspath(os.path.expanduser(folder))
    if not os.path.isdir(folder):
        raise ConfigError(f"lora_dir={folder} is not a folder; give the folder of the LoRA files", setting="lora_dir")
    out = {}
    for entry in sorted(os.listdir(folder)):
        stem, ext = os.path.splitext(entry)
        if ext in LORA_FILES and os.path.isfile(os.path.join(folder, entry)):
            if stem in out:
                raise ConfigError(
                    f"lora_dir={folder} holds two LoRAs named {stem!r} ({os.path.basename(out[stem].path)} and "
                    f"{entry}); rename one",
                    setting="lora_dir",
                )
            out[stem] = RegisteredLora(stem, os.path.join(folder, entry), _recipe(os.path.join(folder, stem + ".json")))
    if not out:
        raise ConfigError(
            f"lora_dir={folder} holds no LoRA file (.safetensors, .pth, .pt); put them there or drop lora_dir=",
            setting="lora_dir",
        )
    return out


def _recipe(path: str) -> dict:
    if not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            recipe = json.load(f)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} is not a readable JSON recipe ({exc})", setting="lora_dir") from None
    unknown = sorted(set(recipe) - set(RECIPE_KEYS)) if isinstance(recipe, dict) else ["(not an object)"]
    if unknown:
        raise ConfigError(
            f"{path}: {unknown[0]} is not a recipe key; a LoRA's recipe may set {', '.join(RECIPE_KEYS)}",
            setting="lora_dir",
        )
    return recipe


def request_loras(value, registry: dict, experts: int, field_name: str = "loras") -> tuple[list, dict]:
    """A request's `loras` (or `lora`) → ([(role, path, scale)] with role all | high | low, the
    recipes' settings); RequestError naming the field for anything else."""
    items = [value] if field_name == "lora" else value
    if field_name == "lora" and not isinstance(value, dict):
        raise RequestError(f'lora={_shown(value)} must be {{"name": …, "scale": …}}', "lora")
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise RequestError(f'{field_name}={_shown(value)} must be a list of {{"name": …, "scale": …}}', field_name)
    if len(items) > MAX_LORAS:
        raise RequestError(f"{field_name} names {len(items)} LoRAs; at most {MAX_LORAS} per request", field_name)
    out, recipe, seen = [], {}, set()
    for item in items:
        extra = sorted(set(item) - {"name", "scale", "scale_high", "scale_low"})
        if extra:
            why = "; the server opens no path a client sends, only registered names" if "path" in extra else ""
            raise RequestError(
                f"{field_name}.{extra[0]} is not read (name, scale, scale_high, scale_low){why}", field_name
            )
        name = item.get("name")
        if name not in registry:
            names = ", ".join(registry) or "none (start the server with lora_dir=FOLDER)"
            raise RequestError(
                f"{field_name}: no LoRA named {_shown(name)} is registered; registered: {names}", field_name
            )
        if name in seen:
            raise RequestError(f"{field_name} names {name!r} twice; name each LoRA once", field_name)
        seen.add(name)
        scale = _number(item.get("scale", 1.0), f"{field_name}.scale")
        if experts == 1:
            if "scale_high" in item or "scale_low" in item:
                raise RequestError(
                    f"{field_name}: scale_high / scale_low are for two-expert models; give scale", field_name
                )
            out.append(("all", registry[name].path, scale))
        else:
            for role in ("high", "low"):
                strength = _number(item.get(f"scale_{role}", scale), f"{field_name}.scale_{role}")
                if strength > 0:  # 0 leaves that expert alone
                    out.append((role, registry[name].path, strength))
        recipe = {**recipe, **registry[name].recipe}
    return out, recipe


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise RequestError(
            f"{where}={_shown(value)} must be a number ≥ 0 (the LoRA's strength; 1 as trained)", where.split(".")[0]
        )
    return float(value)


def with_request_loras(start: tuple, loras: list) -> dict:
    """The run settings lora / lora_high / lora_low (and their scales) for a request's LoRAs after
    the start's (`start`: the start settings' resolved `weights.loras`, (role, path, scale,
    setting) each)."""
    out = {}
    for key, role in ROLES.items():
        mine = [(path, scale) for r, path, scale in loras if r == role]
        if mine:
            both = [(path, scale) for r, path, scale, _ in start if r == role] + mine
            out[key], out[f"{key}_scale"] = [p for p, _ in both], [s for _, s in both]
    return out
