"""The `quantize` and `quant_compute` settings (README "Quantized weights"), checked before
anything loads (no torch import):

    quantize=none|fp8|int8          quantize a bf16/fp32 checkpoint's block linears at load, one
                                    float32 scale per output channel (weights/quantized/);
                                    LoRAs are merged first, into the wide weight
    quant_compute=auto|dequant|fp8  how a quantized layer multiplies: dequant widens its weight to
                                    the run's dtype as it runs (every device, both backends); fp8
                                    multiplies in FP8 with per-token activation scales
                                    (torch._scaled_mm, W8A8); auto = fp8 on CUDA sm_89+ (H100,
                                    B200) with compile=true, dequant elsewhere (eager FP8 measured
                                    slower than bf16 on an H200) — decided by the backend

Decisions: quantize=fp8 with dtype=float32 is allowed (weights stored in one byte, widened to
float32: the memory saving is the point, the quantization error is the same as under bf16);
quant_compute=fp8 needs fp8 weights, so it is refused with quantize=int8 and on JAX (whose
layers widen: XLA's CPU/TPU dots take no fp8 operands with per-token scales), and wherever no
layer would hold any: with quantize=none and no expert file (checkpoint folders load wide),
here; with expert files, once their headers say what they store (pipeline/checkpoint.py
`check_fp8_compute`: FP8 runs only if some expert holds float8 block linears — an fp8 file, or
a wide one quantized by quantize=fp8).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..backends.capabilities import capabilities
from ..errors import ConfigError

QUANTIZE = ("none", "fp8", "int8")
QUANT_COMPUTE = ("auto", "dequant", "fp8")
# conf/config.yaml's values: a run at these is keyed as runs were before the settings existed (jobs/keys.py)
DEFAULTS = {"quantize": "none", "quant_compute": "auto"}


@dataclass(frozen=True)
class QuantSettings:
    quantize: str  # none | fp8 | int8: what the loader does to a wide checkpoint's block linears
    compute: str  # auto | dequant | fp8: asked for; the backend records what it chose


NO_QUANTIZATION = QuantSettings("none", "auto")


def quant_settings(cfg: Mapping, backend: str, expert_files: bool = False) -> QuantSettings:
    """`expert_files`: weights_high=/weights_low=/weights= were given (an fp8 file brings float8
    weights without quantize=; checked against the files' headers later)."""
    quantize = _choice(cfg, "quantize", QUANTIZE)
    compute = _choice(cfg, "quant_compute", QUANT_COMPUTE)
    if compute == "fp8" and quantize == "int8":
        raise ConfigError(
            "quant_compute=fp8 multiplies float8 weights but quantize=int8 stores int8; set quantize=fp8, "
            "or quant_compute=dequant (or auto) to widen the int8 weights as each layer runs"
        )
    if compute == "fp8" and not capabilities(backend).fp8_compute:
        raise ConfigError(
            "quant_compute=fp8 is the PyTorch FP8 GEMM (torch._scaled_mm) but backend=jax widens quantized "
            "weights inside the layer scan; set quant_compute=dequant (or auto), or backend=torch"
        )
    if compute == "fp8" and quantize == "none" and not expert_files:
        # a checkpoint folder's weights load in the run's dtype: the FP8 GEMM would never run
        raise ConfigError(
            "quant_compute=fp8 multiplies float8 weights, but quantize=none keeps every weight in the "
            "run's dtype (nothing would run in FP8); add quantize=fp8 (or give fp8 expert files: "
            "weights_high=/weights_low=/weights=), or set quant_compute=dequant (or auto)"
        )
    return QuantSettings(quantize=quantize, compute=compute)


def _choice(cfg: Mapping, key: str, options: tuple[str, ...]) -> str:
    if key not in cfg:
        raise ConfigError(
            f"{key} is missing from the settings; compose them with parallel_wan.config.compose "
            "(conf/config.yaml holds every default)"
        )
    value = cfg[key]
    if not isinstance(value, str) or value not in options:
        raise ConfigError(f"{key}={value!r} is not known; choose one of: {', '.join(options)}")
    return value
