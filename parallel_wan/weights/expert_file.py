"""One expert's weights from a single safetensors file (`weights_high=` / `weights_low=` /
`weights=`), quantized or not, described from its header before anything loads.

The files users have (../README "Quantized weights"), keys in the official Wan names, with or
without ComfyUI's `model.diffusion_model.` prefix:

- `scaled_fp8` (Kijai's `*_fp8_e4m3fn_scaled_KJ`, older ComfyUI, LightX2V's `--comfyui_mode`):
  float8_e4m3fn `<layer>.weight`, a scalar `<layer>.scale_weight`, a `scaled_fp8` marker tensor.
- `comfy_mixed` (ComfyUI's mixed precision): `<layer>.weight_scale` — a scalar for
  float8_e4m3fn, an (out/b, in/b) table for int8_blockwise (b = 128 in ComfyUI) —, optional
  `<layer>.input_scale`, a `<layer>.comfy_quant` JSON tensor and `_quantization_metadata` in
  the header's metadata naming each layer's format.
- `lightx2v`: int8 or float8_e4m3fn `<layer>.weight`, `<layer>.weight_scale` of shape [out, 1].
- NVFP4 (ComfyUI's `nvfp4` format — `comfy_mixed` — and LightX2V's): uint8 `<layer>.weight`
  (out, in/2), two e2m1 codes a byte; float8_e4m3fn `<layer>.weight_scale`, one per 16 inputs,
  in cuBLAS's swizzled 128x4 layout (shape: out and in/16 rounded up to 128 and 4); a float32
  global scale — ComfyUI's `<layer>.weight_scale_2` (element 2j in the HIGH nibble), or
  LightX2V's `<layer>.alpha` · `<layer>.input_global_scale` (element 2j low, NVIDIA's order).
- `plain`: bf16/fp16/fp32 (ComfyUI's repackaged experts); float8 weights without any scale
  load as scale 1 (`fp8_unscaled`, what ComfyUI does with them).

Every quantized block linear (`quantized.names.quantizable`) ends in the one in-memory form of
weights/quantized/: the weight as stored (int8 / float8_e4m3fn) and a float32 `weight_scale`
(out, G) — a scalar expanded to its rows (G = 1), per-row as is, a block table repeated over
each block's rows (G = in/b); NVFP4: the packed weight (in our nibble order), its block scales
unswizzled to row order and its global scale expanded to the rows (quantized/nvfp4.py). Any
other tensor stored quantized (a head linear some converters quantize) is widened (W = q · s)
and cast to the run's dtype as it loads, like a plain tensor.

Everything here reads headers plus the scales (a few KB; NVFP4's block scales are 1/8 of the
packed weights' bytes, checked as bytes, chunk by chunk) — never a weight's bytes. Refused in one line
before loading (the caller turns ValueError into exit 2): a key that is not a Wan 2.2
transformer name, a file for another model (shapes against the checkpoint's config), missing
tensors, an unknown scale layout, a scale whose shape does not fit its weight, a non-finite
scale, a negative NVFP4 scale, an NVFP4 weight without its global scale.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from parallel_wan.models.transformer_config import TransformerConfig
from parallel_wan.models.transformer_shapes import param_shapes
from parallel_wan.weights import transformer_keymap
from parallel_wan.weights.animate_keymap import is_animate_name
from parallel_wan.weights.derived_sources import (
    Derived,
    nvfp4_blocks,
    nvfp4_global,
    nvfp4_weight,
    scale_rows,
    stored,
    widened,
)
from parallel_wan.weights.quantized import nvfp4
from parallel_wan.weights.quantized.form import LIMIT
from parallel_wan.weights.quantized.names import global_scale_name, quantizable, scale_name
from parallel_wan.weights.safetensors_io import (
    MappedFile,
    TensorInfo,
    parse_header,
    read_header_bytes,
)

PREFIX = "model.diffusion_model."
MARKER = "scaled_fp8"
COMFY_METADATA = "_quantization_metadata"
# The suffixes a layer's extra tensors carry, per convention.
LEGACY_SCALE, SCALE, INPUT_SCALES, COMFY_QUANT = (
    ".scale_weight",
    ".weight_scale",
    (".input_scale", ".scale_input"),
    ".comfy_quant",
)
# NVFP4's global scales: ComfyUI's one, LightX2V's two (their product is the global scale)
COMFY_GLOBAL, LIGHTX2V_GLOBALS = ".weight_scale_2", (".alpha", ".input_global_scale")
COMFY_FORMATS = {"float8_e4m3fn": torch.float8_e4m3fn, "int8_blockwise": torch.int8, "nvfp4": nvfp4.PACKED}
QUANTIZED = tuple(LIMIT)  # the stored dtypes of weights/quantized/'s one form: float8_e4m3fn, int8, uint8 (NVFP4)
CHECK_CHUNK = 1 << 24  # NVFP4 block-scale bytes checked at a time (16 MB of temporaries)


@dataclass(frozen=True)
class Scale:
    info: TensorInfo
    layout: str  # tensor (one scalar) | rows ([out, 1]) | blocks ((out/b, in/b)) | nvfp4 (swizzled e4m3)
    block: int = 1  # blocks: b rows and b columns per scale
    globals: tuple[TensorInfo, ...] = ()  # nvfp4: the scalars whose product is the global scale
    hi_first: bool = False  # nvfp4: element 2j in the high nibble (ComfyUI)


@dataclass(frozen=True)
class ExpertFile:
    setting: str  # weights_high | weights_low | weights
    path: Path
    format: str  # scaled_fp8 | comfy_mixed | lightx2v | plain | fp8_unscaled (NVFP4: comfy_mixed | lightx2v)
    stored_dtype: str  # the quantized weights' dtype(s), or the block weights' for a plain file
    tensors: dict[str, TensorInfo]  # diffusers name → entry, every model tensor
    scales: dict[str, Scale]  # diffusers weight name → its scale (quantized weights with one)

    @property
    def quantized(self) -> list[str]:
        """The diffusers names of the weights stored quantized."""
        return [n for n, info in self.tensors.items() if info.torch_dtype in QUANTIZED]

    @property
    def fp8_linears(self) -> int:
        """Block linears stored float8: quant_compute=fp8 multiplies these in FP8 (their scale is
        always one per output row: per-block tables are int8-only, `_scale`)."""
        return sum(1 for n, info in self.tensors.items() if quantizable(n) and info.torch_dtype is torch.float8_e4m3fn)

    @property
    def nvfp4_linears(self) -> int:
        """Block linears stored NVFP4: quant_compute=fp4 multiplies these in FP4 on sm_100+."""
        return sum(1 for n, info in self.tensors.items() if quantizable(n) and info.torch_dtype is nvfp4.PACKED)

    @property
    def wide_linears(self) -> int:
        """Block linears stored bf16/fp16/fp32: what quantize=fp8|int8|nvfp4 quantizes as they load."""
        return sum(1 for n, info in self.tensors.items() if quantizable(n) and info.torch_dtype not in QUANTIZED)

    def record(self) -> dict:
        """The sidecar's record (and the log's words)."""
        return {
            "path": str(self.path),
            "format": self.format,
            "stored_dtype": self.stored_dtype,
            "quantized_tensors": len(self.quantized),
        }

    def sources(self) -> dict[str, TensorInfo | Derived]:
        """Diffusers name → what the loader copies: plain tensors as stored, quantized block
        linears as stored plus their float32 (out, G) scale, other quantized tensors widened."""
        out: dict[str, TensorInfo | Derived] = {}
        for name, info in self.tensors.items():
            if info.torch_dtype not in QUANTIZED:
                out[name] = info
                continue
            scale = self.scales.get(name)
            if scale is not None and scale.layout == "nvfp4":
                out.update(_nvfp4_sources(name, info, scale))
            elif quantizable(name):
                out[name] = Derived(info.file, info.start, info.shape, info.torch_dtype, info.name, stored(info))
                groups = info.shape[1] // scale.block if scale is not None and scale.layout == "blocks" else 1
                out[scale_name(name)] = Derived(
                    info.file,
                    info.start,
                    (info.shape[0], groups),
                    torch.float32,
                    scale.info.name if scale else f"{info.name} (scale 1)",
                    scale_rows(scale, info),
                )
            else:
                out[name] = Derived(info.file, info.start, info.shape, None, info.name, widened(info, scale))
        return out


# ------------------------------------------------------------------------------ describing
def describe_expert_file(setting: str, path: str | Path, cfg: TransformerConfig) -> ExpertFile:
    """The file's format and tensors, checked against the expert's config; ValueError (one line
    naming `setting=path`) for anything this loader would not load exactly."""
    path = Path(path)
    where = f"{setting}={path}"
    try:
        raw = read_header_bytes(path)
        infos, metadata = parse_header(path, raw, os.path.getsize(path))
    except (OSError, ValueError) as e:
        raise ValueError(f"{where}: {e}") from None
    entries: dict[str, TensorInfo] = {}
    for key, info in infos.items():
        short = key.removeprefix(PREFIX)
        if short in entries:
            raise ValueError(f"{where}: holds {short} both with and without the {PREFIX!r} prefix; keep one")
        entries[short] = info
    marker = entries.pop(MARKER, None) is not None
    formats = _comfy_formats(where, metadata, entries)

    globals_of = _nvfp4_globals(where, entries)
    legacy = [k for k in entries if k.endswith(LEGACY_SCALE)]
    modern = [k for k in entries if k.endswith(SCALE)]
    if legacy and modern:
        raise ValueError(
            f"{where}: unknown scale layout: both {legacy[0]} (scaled_fp8) and {modern[0]} "
            "(weight_scale) conventions in one file; re-export it with one converter"
        )
    scale_suffix = LEGACY_SCALE if legacy else SCALE
    scale_entries = {k[: -len(scale_suffix)] + ".weight": entries.pop(k) for k in legacy + modern}
    for key in [k for k in entries if k.endswith(INPUT_SCALES + (COMFY_QUANT,))]:
        entries.pop(key)  # activation scales (we scale activations per token) and the format tags, read above

    tensors = _diffusers_names(where, entries)
    _check_shapes(where, {n: _logical(where, info) for n, info in tensors.items()}, cfg)
    scales = {}
    for official, info in scale_entries.items():
        if is_animate_name(official):  # a view of a fused or reshaped tensor: a scale would need splitting too
            raise ValueError(
                f"{where}: {official} is stored quantized ({info.name}); quantized Animate motion/face tensors "
                "are not read yet — use a file that keeps them bf16/fp32 (the block linears may be quantized)"
            )
        name = _diffusers_name(where, official)
        weight = tensors.get(name)
        if weight is None:
            raise ValueError(
                f"{where}: unknown scale layout: {info.name} scales {official}, which the file does not hold"
            )
        if weight.torch_dtype not in QUANTIZED:
            raise ValueError(
                f"{where}: unknown scale layout: {info.name} scales {official}, stored {weight.dtype} "
                "(not int8 / float8_e4m3fn)"
            )
        layer_format = formats.get(official.removesuffix(".weight"))
        scales[name] = _scale(where, info, weight, layer_format, globals_of.get(official, ()))
    for official, found in globals_of.items():
        name = _diffusers_name(where, official)
        if name not in tensors or tensors[name].torch_dtype is not nvfp4.PACKED or name not in scales:
            raise ValueError(
                f"{where}: unknown scale layout: {found[0].name} is an NVFP4 global scale, but {official} is "
                f"{'not in the file' if name not in tensors else 'not a uint8 NVFP4 weight with a weight_scale'}"
            )
    for name, info in tensors.items():
        # float8 without any scale in the file is ComfyUI's unscaled fp8 (scale 1); int8 or NVFP4
        # without one, or one missing among scaled layers, is a file cut short
        unscaled = info.torch_dtype in QUANTIZED and name not in scales
        if unscaled and (info.torch_dtype is not torch.float8_e4m3fn or scales):
            raise ValueError(
                f"{where}: the {info.dtype} tensor {info.name} has no {scale_suffix.lstrip('.')}; "
                "the file is incomplete or of an unknown layout"
            )
        if info.torch_dtype not in QUANTIZED and info.torch_dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise ValueError(
                f"{where}: tensor {info.name} is stored {info.dtype}; expected bf16/fp16/fp32, or int8 / "
                "float8_e4m3fn with a scale, or NVFP4 (uint8 with its scales)"
            )
    _check_scale_values(where, path, scales)
    fmt = _format(marker, legacy, formats, scales, tensors)
    return ExpertFile(setting, path, fmt, _stored_dtype(tensors), tensors, scales)


def _comfy_formats(where: str, metadata: dict, entries: dict[str, TensorInfo]) -> dict[str, str]:
    """Layer (official name, no prefix) → ComfyUI format, from `_quantization_metadata` and the
    per-layer `comfy_quant` tensors (a few bytes of JSON each)."""
    found: list[tuple[str, str]] = []  # (layer, format) from both sources: either may name an unknown one
    text = metadata.get(COMFY_METADATA)
    if text is not None:
        try:
            layers = json.loads(text)["layers"]
            found += [(name.removeprefix(PREFIX), entry["format"]) for name, entry in layers.items()]
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(
                f"{where}: its {COMFY_METADATA} header entry is not ComfyUI's "
                f"{{format_version, layers: {{name: {{format}}}}}} ({e})"
            ) from None
    tags = {k: info for k, info in entries.items() if k.endswith(COMFY_QUANT)}
    if tags:
        mapped = MappedFile(next(iter(tags.values())).file)
        for key, info in tags.items():
            try:
                found.append((key.removesuffix(COMFY_QUANT), json.loads(bytes(mapped.view(info).numpy()))["format"]))
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{where}: {info.name} is not a ComfyUI comfy_quant JSON tag ({e})") from None
    for layer, fmt in found:
        if fmt != "nvfp4" and fmt not in COMFY_FORMATS:
            raise ValueError(
                f"{where}: layer {layer} has ComfyUI format {fmt!r}, an unknown scale layout; this "
                f"loader reads {', '.join(COMFY_FORMATS)}"
            )
    return dict(found)


def _diffusers_name(where: str, official: str) -> str:
    try:
        return transformer_keymap.official_to_diffusers_name(official)
    except KeyError:
        raise ValueError(
            f"{where}: key {official!r} is not a Wan 2.2 transformer tensor in the official names "
            f"(optionally prefixed {PREFIX!r}); this file is for another model or of an unknown "
            "layout"
        ) from None


def _diffusers_names(where: str, entries: dict[str, TensorInfo]) -> dict[str, TensorInfo]:
    """Diffusers name → entry; Animate's motion encoder, face encoder and fused face-adapter
    tensors as views of their entries (weights/animate_keymap.py), its blur buffers left out."""
    for key in entries:
        if not is_animate_name(key):
            _diffusers_name(where, key)  # the DiT's names: refused here with the file's words
    try:
        return transformer_keymap.official_sources(entries)
    except KeyError as e:  # one of Animate's names no rule covers
        raise ValueError(f"{where}: {e.args[0]}") from None


def _check_shapes(where: str, tensors: dict[str, TensorInfo], cfg: TransformerConfig) -> None:
    expected = param_shapes(cfg)
    official = transformer_keymap.diffusers_to_official_name
    wrong = [(n, tensors[n].shape, s) for n, s in expected.items() if n in tensors and tuple(tensors[n].shape) != s]
    if wrong:
        n, have, want = wrong[0]
        raise ValueError(
            f"{where}: {official(n)} has shape {tuple(have)} but the checkpoint's config implies {want} "
            f"(dim={cfg.dim}, num_layers={cfg.num_layers}); the file is for another model"
        )
    missing = [n for n in expected if n not in tensors]
    if missing:
        raise ValueError(
            f"{where}: lacks {len(missing)} tensors the checkpoint's config implies, e.g. "
            f"{', '.join(official(n) for n in missing[:3])}; the file is incomplete or for another model"
        )
    extra = [n for n in tensors if n not in expected]
    image_branch = [n for n in extra if "image_embedder" in n or ".add_k_proj" in n or ".add_v_proj" in n]
    if image_branch and cfg.image_dim is None:  # Wan 2.1 I2V's names, on a model without the branch
        raise ValueError(
            f"{where}: key {official(image_branch[0])!r} is not a Wan 2.2 transformer tensor of this model: it is "
            "Wan 2.1 I2V's image branch (Animate-14B alone has one); this file is for another model"
        )
    if extra:
        raise ValueError(
            f"{where}: holds tensors this model lacks, e.g. {', '.join(official(n) for n in extra[:3])}; "
            "the file is for another model"
        )


def _scale(
    where: str, info: TensorInfo, weight: TensorInfo, comfy_format: str | None, globals_: tuple[TensorInfo, ...]
) -> Scale:
    if comfy_format is not None and COMFY_FORMATS[comfy_format] is not weight.torch_dtype:
        raise ValueError(
            f"{where}: {weight.name} is stored {weight.dtype} but its comfy_quant format says "
            f"{comfy_format}; the file is inconsistent"
        )
    if weight.torch_dtype is nvfp4.PACKED or globals_:
        return _nvfp4_scale(where, info, weight, globals_)
    if info.dtype not in ("F32", "BF16", "F16"):
        raise ValueError(f"{where}: scale {info.name} is stored {info.dtype}; expected a float")
    shape = tuple(info.shape)
    if len(weight.shape) == 2:
        rows, cols = weight.shape
        if math.prod(shape) == 1:  # a scalar however it is shaped: (), [1], [1, 1]
            return Scale(info, "tensor")
        if shape in ((rows,), (rows, 1)):
            return Scale(info, "rows")
        if len(shape) == 2 and weight.torch_dtype is torch.int8 and 0 < shape[0] <= rows and rows % shape[0] == 0:
            block = rows // shape[0]
            if cols % block == 0 and shape[1] == cols // block:
                return Scale(info, "blocks", block)
    elif math.prod(shape) == 1:
        return Scale(info, "tensor")
    raise ValueError(
        f"{where}: scale {info.name} has shape {list(shape)}, which fits no layout of its weight "
        f"{weight.name} {list(weight.shape)} (a scalar, [out, 1], or int8 blocks [out/b, in/b])"
    )


def _check_scale_values(where: str, path: Path, scales: dict[str, Scale]) -> None:
    """Every scale finite, and finite times the largest stored value (so the widened weight
    is finite wherever the stored values are: weights/finite.py checks those as they load);
    NVFP4's scales also positive (e2m1 holds the sign)."""
    if not scales:
        return
    mapped = MappedFile(path)
    for scale in scales.values():
        if scale.layout == "nvfp4":
            _check_nvfp4_values(where, mapped, scale)
            continue
        values = mapped.view(scale.info).to(torch.float32)
        if not torch.isfinite(values * LIMIT[torch.float8_e4m3fn]).all():
            bad = int((~torch.isfinite(values)).sum())
            raise ValueError(
                f"{where}: scale {scale.info.name} holds {bad or 'values too large to widen:'} "
                f"{'non-finite value(s) (NaN or ±inf)' if bad else 'q · scale overflows float32'}; "
                "the file is damaged — download or export it again"
            )


def _format(marker: bool, legacy: list, formats: dict, scales: dict, tensors: dict) -> str:
    if marker or legacy:
        return "scaled_fp8"
    if formats or any(scale.hi_first for scale in scales.values()):  # ComfyUI's tags, or its NVFP4 names
        return "comfy_mixed"
    if scales:
        return "lightx2v"
    if any(info.torch_dtype in QUANTIZED for info in tensors.values()):
        return "fp8_unscaled"
    return "plain"


def _stored_dtype(tensors: dict[str, TensorInfo]) -> str:
    quantized = sorted(
        {
            "nvfp4" if i.torch_dtype is nvfp4.PACKED else str(i.torch_dtype).removeprefix("torch.")
            for i in tensors.values()
            if i.torch_dtype in QUANTIZED
        }
    )
    if quantized:
        return "+".join(quantized)
    blocks = sorted({str(i.torch_dtype).removeprefix("torch.") for n, i in tensors.items() if quantizable(n)})
    return "+".join(blocks)


# ------------------------------------------------------------------------------ NVFP4
def _nvfp4_globals(where: str, entries: dict[str, TensorInfo]) -> dict[str, tuple[TensorInfo, ...]]:
    """Official weight name → its NVFP4 global scale(s), taken out of `entries`: ComfyUI's
    `weight_scale_2`, or LightX2V's `alpha` and `input_global_scale` (both needed)."""
    found: dict[str, dict[str, TensorInfo]] = {}
    for key in [k for k in entries if k.endswith((COMFY_GLOBAL, *LIGHTX2V_GLOBALS))]:
        layer, _, suffix = key.rpartition(".")
        found.setdefault(layer + ".weight", {})["." + suffix] = entries.pop(key)
    out = {}
    for weight, parts in found.items():
        for info in parts.values():
            if info.dtype not in ("F32", "BF16", "F16") or math.prod(info.shape) != 1:
                raise ValueError(
                    f"{where}: NVFP4 global scale {info.name} is {info.dtype} {list(info.shape)}; expected one "
                    "float value (ComfyUI's weight_scale_2, LightX2V's alpha / input_global_scale)"
                )
        if COMFY_GLOBAL in parts and len(parts) > 1 or COMFY_GLOBAL not in parts and len(parts) != 2:
            names = ", ".join(info.name for info in parts.values())
            raise ValueError(
                f"{where}: unknown scale layout: {weight} has NVFP4 global scale(s) {names}; expected "
                "weight_scale_2 (ComfyUI) or both alpha and input_global_scale (LightX2V)"
            )
        out[weight] = tuple(parts.values())
    return out


def _logical(where: str, info: TensorInfo) -> TensorInfo:
    """A packed NVFP4 weight as the model sees it: (rows, 2 · stored columns), whole blocks of 16
    (checked before the shapes, so a damaged packing is not called a file for another model)."""
    if info.torch_dtype is not nvfp4.PACKED:
        return info
    if len(info.shape) != 2 or (2 * info.shape[1]) % nvfp4.BLOCK:
        raise ValueError(
            f"{where}: NVFP4 weight {info.name} {list(info.shape)} is not (rows, in/2) bytes with a multiple of "
            f"{nvfp4.BLOCK} values a row (an e4m3 scale per {nvfp4.BLOCK}); the file is damaged or of an unknown layout"
        )
    return dataclasses.replace(info, shape=(info.shape[0], 2 * info.shape[1]))


def _nvfp4_scale(where: str, info: TensorInfo, weight: TensorInfo, globals_: tuple[TensorInfo, ...]) -> Scale:
    if weight.torch_dtype is not nvfp4.PACKED:
        raise ValueError(
            f"{where}: {globals_[0].name} is an NVFP4 global scale but {weight.name} is stored {weight.dtype}, "
            "not uint8 (packed e2m1); the file is inconsistent"
        )
    if not globals_:
        raise ValueError(
            f"{where}: the NVFP4 weight {weight.name} has no global scale (weight_scale_2, or alpha and "
            "input_global_scale); the file is incomplete or of an unknown layout"
        )
    if info.dtype != "F8_E4M3":
        raise ValueError(
            f"{where}: NVFP4 block scale {info.name} is stored {info.dtype}; expected F8_E4M3 (float8_e4m3fn)"
        )
    rows, packed = weight.shape  # whole blocks of 16 a row: `_logical` checked
    want = nvfp4.blocked_shape(rows, 2 * packed // nvfp4.BLOCK)
    if tuple(info.shape) != want:
        raise ValueError(
            f"{where}: scale {info.name} has shape {list(info.shape)}, which fits no layout of its NVFP4 weight "
            f"{weight.name} {list(weight.shape)} (swizzled block scales: {list(want)}); export the file again"
        )
    return Scale(info, "nvfp4", nvfp4.BLOCK, globals_, hi_first=globals_[0].name.endswith(COMFY_GLOBAL))


def _check_nvfp4_values(where: str, mapped: MappedFile, scale: Scale) -> None:
    """The global scales finite, not negative, and 6 · 448 · global finite; the e4m3 block scales
    (as bytes: 0x7F / 0xFF are NaN, a set sign bit on a nonzero value is negative) neither."""
    product = 1.0
    for info in scale.globals:
        value = float(mapped.view(info).to(torch.float32).reshape(()))
        if not math.isfinite(value) or value < 0:
            raise ValueError(
                f"{where}: NVFP4 global scale {info.name} is {value}, {'negative' if value < 0 else 'not finite'}; "
                "the file is damaged — download or export it again"
            )
        product *= value
    if not math.isfinite(product * nvfp4.E2M1_MAX * nvfp4.E4M3_MAX):
        raise ValueError(
            f"{where}: NVFP4 global scale {scale.globals[0].name} is too large to widen: q · scale overflows "
            "float32; the file is damaged — download or export it again"
        )
    table = mapped.view(scale.info).view(torch.uint8).reshape(-1)
    nan = negative = 0
    for begin in range(0, table.numel(), CHECK_CHUNK):
        part = table[begin : begin + CHECK_CHUNK]
        is_nan = (part & 0x7F) == 0x7F
        nan += int(is_nan.sum())
        negative += int(((part > 0x80) & ~is_nan).sum())
    if nan or negative:
        what = f"{nan} non-finite value(s) (NaN)" if nan else f"{negative} negative value(s)"
        raise ValueError(
            f"{where}: scale {scale.info.name} holds {what}; NVFP4 block scales are positive e4m3 — the file "
            "is damaged, download or export it again"
        )


def _nvfp4_sources(name: str, info: TensorInfo, scale: Scale) -> dict[str, Derived]:
    """An NVFP4 block linear as the form's three tensors (packed weight, row-order e4m3 block
    scales, float32 global per row); any other NVFP4 tensor widened (its logical shape)."""
    if not quantizable(name):
        wide = _logical(str(info.file), info)
        return {name: Derived(info.file, info.start, wide.shape, None, info.name, widened(info, scale))}
    rows, packed = info.shape
    at = (info.file, info.start)
    return {
        name: Derived(*at, (rows, packed), nvfp4.PACKED, info.name, nvfp4_weight(info, scale.hi_first)),
        scale_name(name): Derived(
            *at, (rows, 2 * packed // nvfp4.BLOCK), nvfp4.SCALE, scale.info.name, nvfp4_blocks(scale, info)
        ),
        global_scale_name(name): Derived(
            *at, (rows, 1), torch.float32, " · ".join(g.name for g in scale.globals), nvfp4_global(scale, info)
        ),
    }
