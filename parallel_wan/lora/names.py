"""Every LoRA key → the model parameter it changes and how, for the three formats users have,
through the project's one name table (weights/transformer_keymap.py):

  diffusers / PEFT   transformer.blocks.0.attn1.to_q.lora_A.weight, …lora_B.weight, …lora_B.bias
                     (diffusers names; alpha and r from the header's adapter config, if any)
  ComfyUI / Kijai /  diffusion_model.blocks.0.self_attn.q.lora_down.weight (or lora_A), …lora_up
  lightx2v           (or lora_B), ….alpha, and full deltas: ….diff (a weight), ….diff_b (a
                     bias), blocks.0.diff_m (the block's modulation table); official names
  musubi-tuner       lora_unet_blocks_0_self_attn_q.lora_down.weight, ….lora_up.weight, ….alpha
                     (official names with "_" for ".")

Keys of modules Wan 2.2 does not have (Wan 2.1 I2V's image branch: k_img, v_img, norm_k_img,
img_emb) are dropped and counted; any other key that names nothing in the model is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigError
from ..weights import transformer_keymap

# Wan 2.1 I2V's image branch, in official, musubi ("_"-joined) and diffusers names.
WAN21_IMAGE_BRANCH = (
    ".k_img.",
    ".v_img.",
    ".norm_k_img.",
    "img_emb.",
    "_k_img.",
    "_v_img.",
    "_norm_k_img.",
    "_img_emb_",
    ".add_k_proj.",
    ".add_v_proj.",
    ".norm_added_k.",
    "image_embedder.",
)
DOWN, UP, UP_BIAS, ALPHA, DIFF, DIFF_B, DIFF_M = "down", "up", "up_bias", "alpha", "diff", "diff_b", "diff_m"


@dataclass(frozen=True)
class Entry:
    key: str  # as stored in the file
    target: str  # diffusers name: the module (down/up/up_bias/alpha) or the parameter (diff*)
    part: str


def detect_format(keys) -> str:
    keys = list(keys)
    if any(k.startswith("lora_unet_") for k in keys):
        return "musubi"
    if any(k.startswith(("diffusion_model.", "model.diffusion_model.")) for k in keys):
        return "comfyui"
    return "peft"


_PEFT = re.compile(r"^(?:transformer\.)?(?P<module>.+?)\.(?P<part>lora_A|lora_B)(?:\.default)?\.(?P<leaf>weight|bias)$")
_COMFY = re.compile(
    r"^(?:model\.)?diffusion_model\.(?P<module>.+?)\.(?P<part>lora_down\.weight|lora_up\.weight|"
    r"lora_A\.weight|lora_B\.weight|alpha|diff|diff_b|diff_m)$"
)
_MUSUBI = re.compile(
    r"^lora_unet_(?P<module>[A-Za-z0-9_]+?)\.(?P<part>lora_down\.weight|lora_up\.weight|alpha|"
    r"diff|diff_b|diff_m)$"
)
_PARTS = {
    "lora_A": DOWN,
    "lora_down.weight": DOWN,
    "lora_A.weight": DOWN,
    "lora_B": UP,
    "lora_up.weight": UP,
    "lora_B.weight": UP,
    "alpha": ALPHA,
    "diff": DIFF,
    "diff_b": DIFF_B,
    "diff_m": DIFF_M,
}


def _official_module(module: str) -> str:
    """diffusers name of an official module path (its parameters' prefix)."""
    return transformer_keymap.official_to_diffusers_name(module + ".weight")[: -len(".weight")]


def _target(module: str, part: str, official: bool) -> str:
    """The diffusers module (LoRA pairs, alphas) or parameter (full deltas) a key changes."""
    if part == DIFF_M:  # ComfyUI: `X.diff_m` patches X's modulation table (`X.modulation`)
        param = f"{module}.modulation" if module != "head" else "head.modulation"
        return transformer_keymap.official_to_diffusers_name(param) if official else param
    if part in (DIFF, DIFF_B):
        leaf = ".weight" if part == DIFF else ".bias"
        return transformer_keymap.official_to_diffusers_name(module + leaf) if official else module + leaf
    return _official_module(module) if official else module


def parse_keys(
    keys, where: str, official_modules: dict[str, str], image_branch: bool = False
) -> tuple[str, list[Entry], list[str]]:
    """(format, entries, dropped keys). official_modules: "_"-joined official module name →
    official module name, for musubi's flattened names. image_branch: the model has one
    (Animate-14B), so its keys are kept; else they are Wan 2.1's and dropped."""
    fmt = detect_format(keys)
    entries, dropped = [], []
    for key in keys:
        if not image_branch and any(piece in key for piece in WAN21_IMAGE_BRANCH):
            dropped.append(key)
            continue
        if key.endswith(".dora_scale"):
            raise ConfigError(
                f"{where}: {key} is a DoRA magnitude; DoRA LoRAs are not supported (merge it into a plain LoRA first)"
            )
        match = {"peft": _PEFT, "comfyui": _COMFY, "musubi": _MUSUBI}[fmt].match(key)
        if match is None:
            raise ConfigError(
                f"{where}: key {key!r} is not a LoRA key of the {fmt} format this file uses; "
                "it may be another model's LoRA"
            )
        module, raw = match.group("module"), match.group("part")
        if fmt == "peft":
            part = UP_BIAS if (raw == "lora_B" and match.group("leaf") == "bias") else _PARTS[raw]
            if raw == "lora_A" and match.group("leaf") == "bias":
                raise ConfigError(f"{where}: {key} gives lora_A a bias, which LoRA does not have")
        else:
            part = _PARTS[raw]
        if fmt == "musubi":
            if module not in official_modules:
                raise ConfigError(f"{where}: key {key!r} names no module of this Wan 2.2 model")
            module = official_modules[module]
        try:
            target = _target(module, part, official=fmt != "peft")
        except KeyError:
            raise ConfigError(
                f"{where}: key {key!r} names no module of this Wan 2.2 model (is it a LoRA for another model?)"
            ) from None
        entries.append(Entry(key, target, part))
    return fmt, entries, dropped


def official_module_names(param_names) -> dict[str, str]:
    """musubi's flat names ("blocks_0_self_attn_q") → official module names, for the model
    whose diffusers parameters are `param_names`."""
    out = {}
    for name in param_names:
        try:
            official = transformer_keymap.diffusers_to_official_name(name)
        except KeyError:  # Animate's motion/face encoders: no official name a LoRA could use
            continue
        module = official.rsplit(".", 1)[0] if official.endswith((".weight", ".bias")) else official
        out[module.replace(".", "_")] = module
        if official.endswith(".modulation"):  # diff_m targets the module that holds the table
            holder = official[: -len(".modulation")]
            out[holder.replace(".", "_")] = holder
    return out
