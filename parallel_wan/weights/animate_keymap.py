"""Animate-14B's own parameters in the official layout (`wan/modules/animate/`: the LIA motion
encoder, the face encoder, the face adapters) ↔ diffusers' `WanAnimateTransformer3DModel` names.

Unlike the DiT's names (transformer_keymap.py) these are not all renames:
- the motion encoder's convolutions sit in `nn.Sequential`s whose indices shift with their blur
  (`enc.net_app.convs.0` is diffusers' `conv_in`, `convs.1…n` its `res_blocks.0…n-1`, the last
  one `conv_out`), and a FusedLeakyReLU's bias is stored (1, C, 1, 1) where diffusers holds (C,);
- each blur's 4 × 4 kernel is a persistent buffer in the official file and a constant in
  diffusers (and here): read past, never loaded;
- a face adapter's keys and values are one (2·dim, dim) `linear1_kv`, keys first (the official
  `rearrange(… (K H D) …, K=2)`), which diffusers holds as `to_k` and `to_v`.

Each of these is a different *view* of the stored bytes (a row range, another shape), so the
loader reads them as it reads any tensor — sharded by rows, memory-mapped, no copy made here.
The table was checked against the official class built on the meta device (14B: every key and
shape, tests/unit/test_animate_official_layout.py).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping

from .safetensors_header import TensorInfo

_CONVS = re.compile(r"^motion_encoder\.enc\.net_app\.convs\.(\d+)\.(.+)$")
_FUSER = re.compile(r"^face_adapter\.fuser_blocks\.(\d+)\.(linear1_kv|linear1_q|linear2|q_norm|k_norm)\.(weight|bias)$")
_FACE_CONV = re.compile(r"^face_encoder\.(conv1_local|conv2|conv3)\.conv\.(weight|bias)$")
_FC = re.compile(r"^motion_encoder\.enc\.fc\.(\d+)\.(weight|bias)$")
_ADAPTER = {"linear1_q": "to_q", "linear2": "to_out", "q_norm": "norm_q", "k_norm": "norm_k"}
# inside a residual block: (official Sequential path, diffusers name); the blur kernels are None
_RES_BLOCK = {
    "conv1.0.weight": "conv1.weight",
    "conv1.1.bias": "conv1.act_fn.bias",
    "conv2.0.kernel": None,
    "conv2.1.weight": "conv2.weight",
    "conv2.2.bias": "conv2.act_fn.bias",
    "skip.0.kernel": None,
    "skip.1.weight": "conv_skip.weight",
}
SYNTHESIS = ("motion_encoder.dec.direction.weight", "motion_encoder.motion_synthesis_weight")
BLUR = (1, 3, 3, 1)  # the official Blur's kernel taps (make_kernel: their outer product, normalised)


def is_animate_name(name: str) -> bool:
    """Whether `name` (official) is one of Animate's motion encoder, face encoder or adapter."""
    return name.startswith(("motion_encoder.", "face_encoder.", "face_adapter."))


def official_views(infos: Mapping[str, TensorInfo]) -> dict[str, list[tuple[str, TensorInfo]]]:
    """Official name → [(diffusers name, the stored tensor or a view of it)] for the official
    Animate tensors in `infos` (name → TensorInfo): one pair for most, two for a fused
    `linear1_kv`, none for a blur kernel. Raises KeyError naming a tensor no rule covers."""
    last = _conv_out_index(infos)
    return {name: _views(name, info, last) for name, info in infos.items() if is_animate_name(name)}


def _views(name: str, info: TensorInfo, last: int | None) -> list[tuple[str, TensorInfo]]:
    if name == SYNTHESIS[0]:
        return [(SYNTHESIS[1], info)]
    if m := _FC.match(name):
        return [(f"motion_encoder.motion_network.{m.group(1)}.{m.group(2)}", info)]
    if m := _FACE_CONV.match(name):
        return [(f"face_encoder.{m.group(1)}.{m.group(2)}", info)]
    if name in ("face_encoder.out_proj.weight", "face_encoder.out_proj.bias", "face_encoder.padding_tokens"):
        return [(name, info)]
    if m := _FUSER.match(name):
        index, layer, leaf = m.groups()
        prefix = f"face_adapter.{index}."
        if layer != "linear1_kv":
            return [(f"{prefix}{_ADAPTER[layer]}.{leaf}", info)]
        half = info.shape[0] // 2
        return [(f"{prefix}to_k.{leaf}", _rows(info, 0, half)), (f"{prefix}to_v.{leaf}", _rows(info, half, 2 * half))]
    if m := _CONVS.match(name):
        index, rest = int(m.group(1)), m.group(2)
        if index == 0 and rest == "0.weight":
            return [("motion_encoder.conv_in.weight", info)]
        if index == 0 and rest == "1.bias":
            return [("motion_encoder.conv_in.act_fn.bias", _flat(info))]
        if index == last and rest == "weight":
            return [("motion_encoder.conv_out.weight", info)]
        if 0 < index != last and rest in _RES_BLOCK:
            target = _RES_BLOCK[rest]
            if target is None:  # a blur kernel: a constant, not a weight
                return []
            view = _flat(info) if target.endswith("act_fn.bias") else info
            return [(f"motion_encoder.res_blocks.{index - 1}.{target}", view)]
    raise KeyError(
        f"transformer parameter {name!r} is not one of Animate-14B's official motion encoder, face encoder or "
        "face adapter tensors; this is not the official Wan2.2-Animate-14B transformer"
    )


def _conv_out_index(names) -> int | None:
    """The motion encoder's last convolution: the one `convs.N.weight` without a Sequential inside."""
    found = [int(m.group(1)) for n in names if (m := _CONVS.match(n)) and m.group(2) == "weight"]
    return max(found) if found else None


def _rows(info: TensorInfo, begin: int, end: int) -> TensorInfo:
    """Rows [begin, end) of a stored tensor, as a tensor of its own."""
    row = math.prod(info.shape[1:]) * _itemsize(info)
    start = info.start + begin * row
    return dataclasses.replace(info, shape=(end - begin, *info.shape[1:]), start=start, end=start + (end - begin) * row)


def _flat(info: TensorInfo) -> TensorInfo:
    """A (1, C, 1, 1) bias as the (C,) it is."""
    if math.prod(info.shape) != max(info.shape, default=1):
        raise KeyError(f"{info.name} has shape {info.shape}; expected an activation bias of shape (1, C, 1, 1)")
    return dataclasses.replace(info, shape=(math.prod(info.shape),))


def _itemsize(info: TensorInfo) -> int:
    return (info.end - info.start) // max(math.prod(info.shape), 1)


def diffusers_to_official_name(name: str) -> str:
    """The official name holding diffusers' `name` (to_k and to_v: their `linear1_kv`), for messages."""
    if name == SYNTHESIS[1]:
        return SYNTHESIS[0]
    if m := re.match(r"^face_adapter\.(\d+)\.(to_q|to_k|to_v|to_out|norm_q|norm_k)\.(weight|bias)$", name):
        layer = {v: k for k, v in _ADAPTER.items()}.get(m.group(2), "linear1_kv")
        return f"face_adapter.fuser_blocks.{m.group(1)}.{layer}.{m.group(3)}"
    if m := re.match(r"^face_encoder\.(conv1_local|conv2|conv3)\.(weight|bias)$", name):
        return f"face_encoder.{m.group(1)}.conv.{m.group(2)}"
    if m := re.match(r"^motion_encoder\.motion_network\.(\d+)\.(weight|bias)$", name):
        return f"motion_encoder.enc.fc.{m.group(1)}.{m.group(2)}"
    if m := re.match(r"^motion_encoder\.res_blocks\.(\d+)\.(.+)$", name):
        rest = {v: k for k, v in _RES_BLOCK.items() if v}[m.group(2)]
        return f"motion_encoder.enc.net_app.convs.{int(m.group(1)) + 1}.{rest}"
    if name == "motion_encoder.conv_in.weight":
        return "motion_encoder.enc.net_app.convs.0.0.weight"
    if name == "motion_encoder.conv_in.act_fn.bias":
        return "motion_encoder.enc.net_app.convs.0.1.bias"
    if name == "motion_encoder.conv_out.weight":
        return "motion_encoder.enc.net_app.convs.N.weight"  # N: one past the residual blocks
    return name


def to_official(state_dict: Mapping) -> dict:
    """Diffusers' Animate tensors (torch) → the official file's, blur kernels included: what the
    official class's `state_dict()` holds (the built-in tiny model's official layout)."""
    import torch

    out, blocks = (
        {},
        1 + max((int(n.split(".")[2]) for n in state_dict if n.startswith("motion_encoder.res_blocks.")), default=-1),
    )
    taps = torch.tensor(BLUR, dtype=torch.float32)
    kernel = torch.outer(taps, taps) / torch.outer(taps, taps).sum()
    for name, tensor in state_dict.items():
        if not is_animate_name(name):
            continue
        if re.match(r"^face_adapter\.\d+\.to_v\.", name):
            continue  # with its to_k
        official = diffusers_to_official_name(name)
        if ".to_k." in name:
            tensor = torch.cat([tensor, state_dict[name.replace(".to_k.", ".to_v.")]])
        if name.endswith("act_fn.bias"):
            tensor = tensor.reshape(1, -1, 1, 1)
        out[official.replace("convs.N.", f"convs.{blocks + 1}.")] = tensor
    for i in range(blocks):
        for part in ("conv2", "skip"):
            out[f"motion_encoder.enc.net_app.convs.{i + 1}.{part}.0.kernel"] = kernel.clone()
    return out
