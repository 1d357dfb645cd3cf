"""Quantized expert files as users download them, written here from a tiny model, and their
dequantization into an ordinary diffusers model — the oracle the loader is compared with.

Written from the format descriptions (../shared/research/quantized_formats.md), independently
of parallel_wan's loader: keys in the official Wan names (optionally `model.diffusion_model.`
prefixed), the block linears quantized (and, for scaled_fp8, the head too: converters quantize
it, and the loader must widen it), everything else as the model holds it.

FORMATS:
  scaled_fp8      Kijai / old ComfyUI: float8_e4m3fn weight, scalar `scale_weight`, `scaled_fp8` marker
  comfy_fp8       ComfyUI mixed precision: float8 weight, scalar `weight_scale`, `input_scale`,
                  a `comfy_quant` JSON tag per layer, `_quantization_metadata` in the header
  comfy_int8      … int8_blockwise: `weight_scale` (out/b, in/b), b = BLOCK (ComfyUI: 128; the
                  tiny model's 128-wide linears would give one block, so 32 here)
  lightx2v_int8   LightX2V: int8 weight, `weight_scale` [out, 1] = absmax/127
  lightx2v_fp8    … float8_e4m3fn, absmax/448
  plain_bf16      a bf16 single file (ComfyUI's repackaged experts)
  comfy_nvfp4     ComfyUI's nvfp4: uint8 weight (out, in/2), element 2j in the HIGH nibble; e4m3
                  `weight_scale` per 16 inputs in cuBLAS's swizzled 128x4 layout (padded tiles);
                  a float32 scalar `weight_scale_2` = absmax / (6 · 448); a `comfy_quant` tag
  lightx2v_nvfp4  LightX2V's: element 2j in the LOW nibble, the same swizzled block scales, the
                  global scale as `alpha` · `input_global_scale`
"""

import json
import re

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from parallel_wan.weights.transformer_keymap import (
    diffusers_to_official_name,
    official_to_diffusers_name,
)

PREFIX = "model.diffusion_model."
BLOCK = 32
FORMATS = (
    "scaled_fp8",
    "comfy_fp8",
    "comfy_int8",
    "lightx2v_int8",
    "lightx2v_fp8",
    "plain_bf16",
    "comfy_nvfp4",
    "lightx2v_nvfp4",
)
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])  # code 0..7; code | 8 is negative
INPUT_GLOBAL = 2.0  # lightx2v_nvfp4's input_global_scale (alpha = global / this)
_BLOCK_LINEAR = re.compile(
    r"^blocks\.\d+\.(self_attn|cross_attn)\.(q|k|v|o)\.weight$|^blocks\.\d+\.ffn\.(0|2)\.weight$"
)
FP8_MAX, INT8_MAX = 448.0, 127.0


def _quantized_layers(fmt, name):
    return bool(_BLOCK_LINEAR.match(name)) or (fmt == "scaled_fp8" and name == "head.head.weight")


def write_expert_file(path, transformer, fmt, prefix=False):
    """The diffusers `transformer`'s weights written as `fmt` at `path` (official names)."""
    state = {diffusers_to_official_name(k): v for k, v in transformer.state_dict().items()}
    return write_official_expert_file(path, state, fmt, prefix)


def write_official_expert_file(path, state, fmt, prefix=False):
    """An expert's tensors under their official names (as an official checkpoint's shards hold
    them) written as `fmt` at `path`."""
    tensors, metadata = {}, {}
    layers = {}
    for name, value in state.items():
        w = value.detach().to(torch.float32)
        if fmt == "plain_bf16":
            tensors[name] = w.to(torch.bfloat16)
            continue
        if not _quantized_layers(fmt, name):
            tensors[name] = w.clone()
            continue
        layer = name.removesuffix(".weight")
        if fmt in ("scaled_fp8", "comfy_fp8"):  # one scale per tensor
            scale = w.abs().amax() / FP8_MAX
            tensors[name] = (w / scale).to(torch.float8_e4m3fn)
            scale_key = ".scale_weight" if fmt == "scaled_fp8" else ".weight_scale"
            tensors[layer + scale_key] = scale.reshape(()) if fmt == "comfy_fp8" else scale.reshape(1)
            if fmt == "comfy_fp8":
                tensors[layer + ".input_scale"] = torch.ones(())
                tensors[layer + ".comfy_quant"] = _json_tensor({"format": "float8_e4m3fn"})
                layers[layer] = {"format": "float8_e4m3fn"}
        elif fmt.endswith("nvfp4"):
            tensors.update(_nvfp4_layer(layer, w, hi_first=fmt == "comfy_nvfp4"))
            if fmt == "comfy_nvfp4":
                tensors[layer + ".comfy_quant"] = _json_tensor({"format": "nvfp4"})
                layers[layer] = {"format": "nvfp4"}
        elif fmt == "comfy_int8":
            out, inp = w.shape
            blocks = w.reshape(out // BLOCK, BLOCK, inp // BLOCK, BLOCK)
            scale = blocks.abs().amax(dim=(1, 3)) / INT8_MAX  # (out/b, in/b)
            q = (blocks / scale[:, None, :, None]).round().clamp(-127, 127).to(torch.int8)
            tensors[name] = q.reshape(out, inp)
            tensors[layer + ".weight_scale"] = scale
            tensors[layer + ".comfy_quant"] = _json_tensor({"format": "int8_blockwise"})
            layers[layer] = {"format": "int8_blockwise"}
        else:  # lightx2v: per output channel
            limit = INT8_MAX if fmt == "lightx2v_int8" else FP8_MAX
            scale = w.abs().amax(dim=1, keepdim=True) / limit
            scaled = w / scale
            tensors[name] = (
                scaled.round().clamp(-127, 127).to(torch.int8) if limit == INT8_MAX else scaled.to(torch.float8_e4m3fn)
            )
            tensors[layer + ".weight_scale"] = scale
    if fmt == "scaled_fp8":
        tensors["scaled_fp8"] = torch.zeros(2, dtype=torch.float8_e4m3fn)
    if layers:
        metadata["_quantization_metadata"] = json.dumps({"format_version": "1.0", "layers": layers})
    if prefix:
        tensors = {(k if k == "scaled_fp8" else PREFIX + k): v for k, v in tensors.items()}
    save_file(tensors, str(path), metadata=metadata or None)
    return str(path)


def _nvfp4_layer(layer, w, hi_first):
    """One NVFP4 linear's tensors: per-tensor global scale, e4m3 block scales, nearest e2m1."""
    out, inp = w.shape
    global_scale = w.abs().amax() / (6.0 * 448.0)
    blocks = w.reshape(out, inp // 16, 16)
    block_scale = (blocks.abs().amax(dim=2) / 6.0 / global_scale).to(torch.float8_e4m3fn)
    total = block_scale.to(torch.float32) * global_scale
    x = torch.where(total[..., None] > 0, blocks / total[..., None], torch.zeros_like(blocks)).reshape(out, inp)
    code = (x.abs()[..., None] - E2M1).abs().argmin(dim=-1).to(torch.uint8) | ((x < 0).to(torch.uint8) << 3)
    even, odd = code[:, 0::2], code[:, 1::2]
    packed = (even << 4 | odd) if hi_first else (odd << 4 | even)
    tensors = {layer + ".weight": packed.contiguous(), layer + ".weight_scale": swizzled(block_scale)}
    if hi_first:
        tensors[layer + ".weight_scale_2"] = global_scale.reshape(())
    else:
        tensors[layer + ".alpha"] = (global_scale / INPUT_GLOBAL).reshape(())
        tensors[layer + ".input_global_scale"] = torch.tensor(INPUT_GLOBAL)
    return tensors


def swizzled(table):
    """cuBLAS's block-scaling layout of a (rows, cols) table, as the (128-padded rows, 4-padded
    cols) table ComfyUI stores: the flat order is tile by tile (row tiles outer), each 128x4
    tile as 32 lines of [rows r, r+32, r+64, r+96] × 4 columns."""
    rows, cols = table.shape
    prow, pcol = -(-rows // 128) * 128, -(-cols // 4) * 4
    padded = torch.zeros(prow, pcol, dtype=torch.float32)
    padded[:rows, :cols] = table.to(torch.float32)
    flat = []
    for rt in range(prow // 128):
        for ct in range(pcol // 4):
            tile = padded[rt * 128 : (rt + 1) * 128, ct * 4 : (ct + 1) * 4]
            for line in range(32):
                flat.append(torch.cat([tile[line + 32 * k] for k in range(4)]))
    return torch.stack(flat).reshape(prow, pcol).to(table.dtype)


def unswizzled(stored, rows, cols):
    """`swizzled`'s inverse (float32 values)."""
    prow, pcol = stored.shape
    flat = stored.to(torch.float32).reshape(-1, 16)
    table = torch.zeros(prow, pcol)
    i = 0
    for rt in range(prow // 128):
        for ct in range(pcol // 4):
            for line in range(32):
                for k in range(4):
                    table[rt * 128 + line + 32 * k, ct * 4 : ct * 4 + 4] = flat[i, 4 * k : 4 * k + 4]
                i += 1
    return table[:rows, :cols]


def _nvfp4_dequantized(raw, name, layer):
    packed = raw[name]
    hi_first = layer + ".weight_scale_2" in raw
    low, high = (packed & 0x0F).long(), (packed >> 4).long()
    even, odd = (high, low) if hi_first else (low, high)
    code = torch.stack((even, odd), dim=-1).reshape(packed.shape[0], -1)
    values = E2M1[code & 7] * torch.where(code >= 8, -1.0, 1.0)
    rows, cols = values.shape
    blocks = unswizzled(raw[layer + ".weight_scale"], rows, cols // 16)
    if hi_first:
        global_scale = raw[layer + ".weight_scale_2"].to(torch.float32)
    else:
        global_scale = raw[layer + ".alpha"].to(torch.float32) * raw[layer + ".input_global_scale"].to(torch.float32)
    return (values.reshape(rows, -1, 16) * blocks[..., None] * global_scale).reshape(rows, cols)


def _json_tensor(obj):
    return torch.tensor(list(json.dumps(obj).encode()), dtype=torch.uint8)


def dequantized_state(path, official=False):
    """Diffusers name (`official`: the file's own name) → float32 W for every model tensor of
    the file: q · scale, a block table's scale applied to its b×b block, unquantized tensors as
    stored (widened to float32)."""
    with safe_open(str(path), "pt") as f:
        raw = {k.removeprefix(PREFIX): f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open is not iterable
    out = {}
    for name, value in raw.items():
        extras = (".scale_weight", ".weight_scale", ".input_scale", ".comfy_quant", ".weight_scale_2", ".alpha")
        if name == "scaled_fp8" or name.endswith((*extras, ".input_global_scale")):
            continue
        layer = name.removesuffix(".weight")
        if value.dtype == torch.uint8:  # NVFP4
            out[name if official else official_to_diffusers_name(name)] = _nvfp4_dequantized(raw, name, layer)
            continue
        w = value.to(torch.float32)
        scale = raw.get(layer + ".scale_weight", raw.get(layer + ".weight_scale"))
        if scale is not None:
            scale = scale.to(torch.float32)
            if scale.ndim == 2 and scale.shape[1] > 1 or scale.ndim == 2 and scale.shape[0] != w.shape[0]:
                scale = scale.repeat_interleave(w.shape[0] // scale.shape[0], 0).repeat_interleave(
                    w.shape[1] // scale.shape[1], 1
                )
            w = w * (scale if scale.ndim == 2 else scale.reshape(()))
        out[name if official else official_to_diffusers_name(name)] = w
    return out


def dequantized_model(model, high=None, low=None):
    """A copy of the tiny `model` whose experts hold the dequantized files (None: as they are)."""
    import copy
    import dataclasses

    replaced = {}
    for field, path in (("transformer", high), ("transformer_2", low)):
        if path is None:
            continue
        module = copy.deepcopy(getattr(model, field))
        module.load_state_dict(dequantized_state(path), strict=True)  # every tensor, nothing else
        replaced[field] = module
    return dataclasses.replace(model, **replaced)


def edited_file(src, dst, edit):
    """A copy of the safetensors file `src` at `dst` with `edit(tensors, metadata)` applied to
    its tensors (stored names) and header metadata, in place; returns dst's path."""
    with safe_open(str(src), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open is not iterable
        metadata = dict(f.metadata() or {})
    edit(tensors, metadata)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(dst), metadata=metadata or None)
    return str(dst)


def loaded_with_a_lora(ckpt, expert, tmp_path):
    """A rank-4 LoRA (strength 0.7, alpha 2) on the expert's quantized file, loaded whole and as
    shard (1, 2) in float32 → (its pairs, the whole tree flat, the half tree flat, the file's
    dequantized state): what a test of the merge into quantized weights compares."""
    from harness.lora_files import lora_pairs, write_lora
    from parallel_wan.lora.merge import expert_lora
    from parallel_wan.models.transformer import keeps_fp32
    from parallel_wan.models.transformer_shapes import param_shapes
    from parallel_wan.weights import tree
    from parallel_wan.weights.loader import load_transformer

    cfg = ckpt.transformers[expert]
    pairs = lora_pairs(cfg, rank=4, seed=3, std=0.05)
    path = write_lora(tmp_path / "lora.safetensors", pairs, "comfyui", alpha=2.0)
    lora = expert_lora(expert, [(path, 0.7, "lora_high")], param_shapes(cfg))
    whole = tree.flatten(load_transformer(ckpt, expert, "float32", keeps_fp32, lora=lora))
    half = tree.flatten(load_transformer(ckpt, expert, "float32", keeps_fp32, (1, 2), lora=lora))
    return pairs, whole, half, dequantized_state(ckpt.expert_files[expert].path)
