"""Official Wan VAE parameter names (`Wan2.1_VAE.pth`, `Wan2.2_VAE.pth`) ↔ diffusers'
AutoencoderKLWan names.

The two layouts differ only in how modules are grouped, never in tensor shapes:

| official                               | diffusers                                     |
|----------------------------------------|-----------------------------------------------|
| conv1 / conv2                          | quant_conv / post_quant_conv                  |
| {en,de}coder.conv1                     | {en,de}coder.conv_in                          |
| {en,de}coder.middle.0 / .1 / .2        | {en,de}coder.mid_block.resnets.0 / attentions.0 / resnets.1 |
| {en,de}coder.head.0 / .2               | {en,de}coder.norm_out / conv_out              |
| residual.0 / .2 / .3 / .6, shortcut    | norm1 / conv1 / norm2 / conv2, conv_shortcut  |
| 2.1 encoder.downsamples.K              | encoder.down_blocks.K (same flat list)        |
| 2.1 decoder.upsamples.K (flat list)    | decoder.up_blocks.I.resnets.J / .upsamplers.0 |
| 2.2 encoder.downsamples.I.downsamples.J | encoder.down_blocks.I.resnets.J / .downsampler |
| 2.2 decoder.upsamples.I.upsamples.J    | decoder.up_blocks.I.resnets.J / .upsampler    |

Attention (norm, to_qkv, proj) and resample (resample.1, time_conv) leaves keep their names.
The flat Wan 2.1 decoder list is regrouped from the names themselves: a resample ends a block.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

VARIANTS = ("wan2.1", "wan2.2")

_RESNET_TO_DIFFUSERS = {
    "residual.0": "norm1",
    "residual.2": "conv1",
    "residual.3": "norm2",
    "residual.6": "conv2",
    "shortcut": "conv_shortcut",
}
_RESNET_TO_OFFICIAL = {v: k for k, v in _RESNET_TO_DIFFUSERS.items()}
_CODER_TO_DIFFUSERS = {"conv1": "conv_in", "head.0": "norm_out", "head.2": "conv_out"}
_CODER_TO_OFFICIAL = {v: k for k, v in _CODER_TO_DIFFUSERS.items()}
_TOP_TO_DIFFUSERS = {"conv1": "quant_conv", "conv2": "post_quant_conv"}
_TOP_TO_OFFICIAL = {v: k for k, v in _TOP_TO_DIFFUSERS.items()}


def official_to_diffusers(state_dict_or_names, variant: str | None = None):
    """Rename official VAE parameters to diffusers'. A mapping gives a new dict with the same
    values under the new names; an iterable of names gives the list of new names, in order.
    `variant` is "wan2.1" or "wan2.2"; None detects it from the names."""
    names = list(state_dict_or_names)
    variant = _resolve_variant(variant, _detect_official(names), "official")
    table = _official_to_diffusers_table(names, variant)
    return _apply(state_dict_or_names, names, table)


def diffusers_to_official(state_dict_or_names, variant: str | None = None):
    """Rename diffusers VAE parameters to the official names; see `official_to_diffusers`."""
    names = list(state_dict_or_names)
    variant = _resolve_variant(variant, _detect_diffusers(names), "diffusers")
    table = _diffusers_to_official_table(names, variant)
    return _apply(state_dict_or_names, names, table)


# ---------------------------------------------------------------------------- plumbing
def _apply(source, names: list[str], table: dict[str, str]):
    renamed = [table[n] for n in names]
    if len(set(renamed)) != len(renamed):
        raise ValueError("VAE key map sent two parameters to the same name; the input mixes layouts")
    if isinstance(source, Mapping):
        return {table[n]: source[n] for n in names}
    return renamed


def _resolve_variant(given: str | None, detected: str | None, layout: str) -> str:
    if given is not None and given not in VARIANTS:
        raise ValueError(f"VAE variant {given!r} is not one of {VARIANTS}")
    if given is not None and detected is not None and given != detected:
        raise ValueError(
            f"VAE variant {given!r} was asked for, but these {layout} parameter names are {detected}'s; "
            f"pass variant={detected!r} or None"
        )
    if given is None and detected is None:
        raise ValueError(
            f"cannot tell the Wan VAE variant from these {layout} parameter names; pass variant='wan2.1' or 'wan2.2'"
        )
    return given or detected


# Names only one variant has: nested blocks (2.2) vs one flat list (2.1) in the official
# layout; resnets/downsampler/upsampler (2.2) vs a flat encoder list and upsamplers.0 (2.1)
# in diffusers'.
_OFFICIAL_2_2 = re.compile(r"^(encoder\.downsamples|decoder\.upsamples)\.\d+\.(downsamples|upsamples)\.")
_OFFICIAL_2_1 = re.compile(r"^(encoder\.downsamples|decoder\.upsamples)\.\d+\.(?!downsamples\.|upsamples\.)")
_DIFFUSERS_2_2 = re.compile(r"^(encoder\.down_blocks\.\d+\.(resnets|downsampler)|decoder\.up_blocks\.\d+\.upsampler)\.")
_DIFFUSERS_2_1 = re.compile(
    r"^(encoder\.down_blocks\.\d+\.(?!resnets\.|downsampler\.)|decoder\.up_blocks\.\d+\.upsamplers\.)"
)


def _detect(names: list[str], wan2_2: re.Pattern, wan2_1: re.Pattern) -> str | None:
    if any(wan2_2.match(n) for n in names):
        return "wan2.2"
    if any(wan2_1.match(n) for n in names):
        return "wan2.1"
    return None


def _detect_official(names: list[str]) -> str | None:
    return _detect(names, _OFFICIAL_2_2, _OFFICIAL_2_1)


def _detect_diffusers(names: list[str]) -> str | None:
    return _detect(names, _DIFFUSERS_2_2, _DIFFUSERS_2_1)


def _unknown(name: str, layout: str) -> ValueError:
    return ValueError(
        f"{name!r} is not a Wan VAE parameter name in the {layout} layout; check that this file is a "
        "Wan 2.1/2.2 VAE state dict in that layout"
    )


def _is_resample(rest: str) -> bool:
    return rest.startswith("resample.") or rest.startswith("time_conv.")


def _rename_prefix(rest: str, table: Mapping[str, str]) -> str:
    """Rename the leading module path of `rest` ("residual.2.weight" → "conv1.weight")."""
    for old, new in table.items():
        if rest.startswith(old + "."):
            return new + rest[len(old) :]
    return rest


# ---------------------------------------------------------------------------- official → diffusers
def _official_to_diffusers_table(names: list[str], variant: str) -> dict[str, str]:
    groups = _official_flat_decoder_groups(names) if variant == "wan2.1" else {}
    return {n: _official_name_to_diffusers(n, variant, groups) for n in names}


def _official_flat_decoder_groups(names: list[str]) -> dict[int, str]:
    """Wan 2.1 `decoder.upsamples.K` → its diffusers module path. Each up block is a run of
    resnets closed by a resample (the last block has none)."""
    kinds: dict[int, str] = {}
    for n in names:
        m = re.match(r"^decoder\.upsamples\.(\d+)\.(.*)$", n)
        if m:
            rest = m.group(2)
            if _is_resample(rest):
                kinds[int(m.group(1))] = "resample"
            elif rest.split(".")[0] in ("residual", "shortcut"):
                kinds[int(m.group(1))] = "resnet"
            else:
                raise ValueError(
                    f"{n!r}: this official decoder has attention in its up blocks (attn_scales not "
                    "empty), which diffusers' AutoencoderKLWan cannot hold"
                )
    paths: dict[int, str] = {}
    block, resnet = 0, 0
    for k in sorted(kinds):
        if kinds[k] == "resample":
            paths[k] = f"decoder.up_blocks.{block}.upsamplers.0"
            block, resnet = block + 1, 0
        else:
            paths[k] = f"decoder.up_blocks.{block}.resnets.{resnet}"
            resnet += 1
    return paths


def _official_name_to_diffusers(name: str, variant: str, flat_decoder: dict[int, str]) -> str:
    head, _, rest = name.partition(".")
    if head in _TOP_TO_DIFFUSERS and rest in ("weight", "bias"):
        return f"{_TOP_TO_DIFFUSERS[head]}.{rest}"
    if head not in ("encoder", "decoder"):
        raise _unknown(name, "official")
    coder = head
    renamed = _rename_prefix(rest, _CODER_TO_DIFFUSERS)
    if renamed != rest:
        return f"{coder}.{renamed}"
    m = re.match(r"^middle\.(\d+)\.(.*)$", rest)
    if m:
        idx, leaf = int(m.group(1)), m.group(2)
        module = f"attentions.{idx // 2}" if idx % 2 else f"resnets.{idx // 2}"
        return f"{coder}.mid_block.{module}.{_rename_prefix(leaf, _RESNET_TO_DIFFUSERS)}"
    outer = "downsamples" if coder == "encoder" else "upsamples"
    blocks = "down_blocks" if coder == "encoder" else "up_blocks"
    resampler = "downsampler" if coder == "encoder" else "upsampler"
    if variant == "wan2.2":
        m = re.match(rf"^{outer}\.(\d+)\.{outer}\.(\d+)\.(.*)$", rest)
        if not m:
            raise _unknown(name, "official Wan 2.2")
        i, j, leaf = m.groups()
        if _is_resample(leaf):
            return f"{coder}.{blocks}.{i}.{resampler}.{leaf}"
        return f"{coder}.{blocks}.{i}.resnets.{j}.{_rename_prefix(leaf, _RESNET_TO_DIFFUSERS)}"
    m = re.match(rf"^{outer}\.(\d+)\.(.*)$", rest)
    if not m:
        raise _unknown(name, "official Wan 2.1")
    k, leaf = int(m.group(1)), m.group(2)
    path = f"encoder.down_blocks.{k}" if coder == "encoder" else flat_decoder[k]
    return f"{path}.{_rename_prefix(leaf, _RESNET_TO_DIFFUSERS)}"


# ---------------------------------------------------------------------------- diffusers → official
def _diffusers_to_official_table(names: list[str], variant: str) -> dict[str, str]:
    resnets_per_block = _resnets_per_block(names)
    return {n: _diffusers_name_to_official(n, variant, resnets_per_block) for n in names}


def _resnets_per_block(names: list[str]) -> dict[tuple[str, int], int]:
    """(coder, block) → number of resnets, which places the resample after them."""
    counts: dict[tuple[str, int], int] = {}
    for n in names:
        m = re.match(r"^(encoder|decoder)\.(?:down|up)_blocks\.(\d+)\.resnets\.(\d+)\.", n)
        if m:
            key = (m.group(1), int(m.group(2)))
            counts[key] = max(counts.get(key, 0), int(m.group(3)) + 1)
    return counts


def _flat_decoder_index(block: int, counts: dict[tuple[str, int], int]) -> int:
    """Start of up block `block` in the Wan 2.1 flat list: earlier blocks' resnets + resample."""
    return sum(counts.get(("decoder", b), 0) + 1 for b in range(block))


def _diffusers_name_to_official(name: str, variant: str, counts: dict[tuple[str, int], int]) -> str:
    head, _, rest = name.partition(".")
    if head in _TOP_TO_OFFICIAL and rest in ("weight", "bias"):
        return f"{_TOP_TO_OFFICIAL[head]}.{rest}"
    if head not in ("encoder", "decoder"):
        raise _unknown(name, "diffusers")
    coder = head
    renamed = _rename_prefix(rest, _CODER_TO_OFFICIAL)
    if renamed != rest:
        return f"{coder}.{renamed}"
    m = re.match(r"^mid_block\.(resnets|attentions)\.(\d+)\.(.*)$", rest)
    if m:
        kind, idx, leaf = m.group(1), int(m.group(2)), m.group(3)
        position = 2 * idx + (1 if kind == "attentions" else 0)
        return f"{coder}.middle.{position}.{_rename_prefix(leaf, _RESNET_TO_OFFICIAL)}"
    outer = "downsamples" if coder == "encoder" else "upsamples"
    blocks = "down_blocks" if coder == "encoder" else "up_blocks"
    resampler = "downsampler" if coder == "encoder" else "upsampler"
    if variant == "wan2.2":
        m = re.match(rf"^{blocks}\.(\d+)\.(?:resnets\.(\d+)|({resampler}))\.(.*)$", rest)
        if not m:
            raise _unknown(name, "diffusers Wan 2.2")
        i, j, is_resampler, leaf = m.groups()
        if is_resampler:
            return f"{coder}.{outer}.{i}.{outer}.{counts.get((coder, int(i)), 0)}.{leaf}"
        return f"{coder}.{outer}.{i}.{outer}.{j}.{_rename_prefix(leaf, _RESNET_TO_OFFICIAL)}"
    if coder == "encoder":
        m = re.match(r"^down_blocks\.(\d+)\.(.*)$", rest)
        if not m:
            raise _unknown(name, "diffusers Wan 2.1")
        return f"encoder.downsamples.{m.group(1)}.{_rename_prefix(m.group(2), _RESNET_TO_OFFICIAL)}"
    m = re.match(r"^up_blocks\.(\d+)\.(?:resnets\.(\d+)|(upsamplers\.0))\.(.*)$", rest)
    if not m:
        raise _unknown(name, "diffusers Wan 2.1")
    i, j, is_upsampler, leaf = m.groups()
    start = _flat_decoder_index(int(i), counts)
    if is_upsampler:
        return f"decoder.upsamples.{start + counts.get(('decoder', int(i)), 0)}.{leaf}"
    return f"decoder.upsamples.{start + int(j)}.{_rename_prefix(leaf, _RESNET_TO_OFFICIAL)}"
