"""A LoRA on a quantized expert file: merged into the dequantized weight, then requantized.

The decision (README "Quantized weights"): a LoRA's change is far below one quantization step of
most weights, so adding it to the stored values is impossible and keeping an unmerged LoRA
beside every quantized layer would put a second path into every backend. Instead each changed
weight is widened (W = q · s, float32), the LoRA added there exactly as for a plain weight
(lora/merge.py), and the sum quantized again per output channel in the weight's own dtype
(`form.quantize_rows`: absmax / 127 or / 448). The result is the one in-memory form, with
G = 1 whatever the file's scale layout was (a block table's rows become per-row scales, stored
repeated over the G columns). Per row, so a sharded load merges only its rows and gets the
rows a whole load would. The cost is one more rounding of the changed weights: at most half a
level per value (int8: absmax/254 of its row; fp8: 2⁻⁴ relative) — what any quantized export
of a merged model also pays.
"""

from __future__ import annotations

import logging

import torch

from ..finite import non_finite, refuse
from .form import KINDS, dequantize, layer_names, quantize_layer
from .names import global_scale_name, scale_name

log = logging.getLogger("parallel_wan")
KIND_OF = {dtype: kind for kind, dtype in KINDS.items()}


def merge_requantized(flat: dict[str, torch.Tensor], name: str, lora, rows: tuple[int, int] | None) -> None:
    """flat[name] (int8/float8/NVFP4 weight rows) and its scales ← requantize(dequantize + LoRA),
    in place (NVFP4: requantized with a global scale per row, as quantize=nvfp4 does)."""
    q, scale, scale_2 = flat[name], flat[scale_name(name)], flat.get(global_scale_name(name))
    merged = lora.merged_source(name, lambda: dequantize(q, scale, scale_2), rows)()
    bad = non_finite(merged)
    if bad:
        raise refuse(f"a LoRA of the {lora.expert} expert", name, bad, merged.numel())
    kind = KIND_OF[q.dtype]
    for target, values in zip(layer_names(name, kind), quantize_layer(merged, kind), strict=True):
        flat[target].copy_(values.expand_as(flat[target]))
