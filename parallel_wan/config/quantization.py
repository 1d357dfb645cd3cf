"""The `quantize` and `quant_compute` settings (README "Quantized weights"), checked before
anything loads (no torch import):

    quantize=none|fp8|int8|nvfp4    quantize a bf16/fp32 checkpoint's block linears at load, one
                                    float32 scale per output channel (weights/quantized/; nvfp4:
                                    e2m1 pairs, an e4m3 scale per 16 inputs, a global scale per
                                    row); LoRAs are merged first, into the wide weight
    quant_compute=auto|dequant|fp8|fp4
                                    how a quantized layer multiplies: dequant widens its weight to
                                    the run's dtype as it runs (every device, both backends); fp8
                                    multiplies fp8 weights in FP8 with per-token activation scales
                                    (torch._scaled_mm, W8A8) and widens NVFP4 weights (W4A16); fp4
                                    also multiplies NVFP4 weights in FP4 with the activations
                                    rounded to NVFP4 (W4A4, CUDA sm_100+): opt-in, because rounding
                                    the activations to 4 bits costs quality (the tiny model: 26.9 dB
                                    against bf16, W4A16 35.9 dB); auto = fp8 on CUDA sm_89+ (H100,
                                    B200) with compile=true, dequant elsewhere (eager FP8 measured
                                    slower than bf16 on an H200) — decided by the backend

Decisions: quantize=fp8 with dtype=float32 is allowed (weights stored in one byte, widened to
float32: the memory saving is the point, the quantization error is the same as under bf16);
quant_compute=fp8 needs fp8 weights, so it is refused with quantize=int8 and on JAX (whose
layers widen: XLA's CPU/TPU dots take no fp8 operands with per-token scales), and wherever no
layer would hold any: with quantize=none and no expert file (checkpoint folders load wide),
here; with expert files, once their headers say what they store (pipeline/checkpoint.py
`check_fp8_compute`: FP8 runs only if some expert holds float8 block linears — an fp8 file, or
a wide one quantized by quantize=fp8; NVFP4 weights count too). quantize=nvfp4 is
PyTorch's only: JAX's layer scan widens one-byte weights and does not unpack e2m1 pairs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..backends.capabilities import capabilities
from ..errors import ConfigError

QUANTIZE = ("none", "fp8", "int8", "nvfp4")
QUANT_COMPUTE = ("auto", "dequant", "fp8", "fp4")
# conf/config.yaml's values: a run at these is keyed as runs were before the settings existed (jobs/keys.py)
DEFAULTS = {"quantize": "none", "quant_compute": "auto"}


@dataclass(frozen=True)
class QuantSettings:
    quantize: str  # none | fp8 | int8 | nvfp4: what the loader does to a wide checkpoint's block linears
    compute: str  # auto | dequant | fp8 | fp4: asked for; the backend records what it chose


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
    if quantize == "nvfp4" and not capabilities(backend).nvfp4_weights:
        raise ConfigError(
            f"quantize=nvfp4 is read by the PyTorch backend only (backend={backend} widens one-byte "
            "weights in its layer scan and does not unpack NVFP4's e2m1 pairs); set quantize=fp8 or "
            "quantize=int8, or backend=torch"
        )
    if compute in ("fp8", "fp4") and not capabilities(backend).fp8_compute:
        raise ConfigError(
            f"quant_compute={compute} is the PyTorch low-precision GEMM (torch._scaled_mm) but backend={backend} "
            "widens quantized weights inside the layer scan; set quant_compute=dequant (or auto), or backend=torch"
        )
    if compute == "fp8" and quantize == "nvfp4":
        raise ConfigError(
            "quant_compute=fp8 multiplies float8 weights but quantize=nvfp4 stores NVFP4 (it would widen every "
            "layer); set quant_compute=fp4 (W4A4 on CUDA sm_100+, lossier) or dequant (or auto) for W4A16"
        )
    if compute == "fp4" and quantize not in ("nvfp4", "none"):
        raise ConfigError(
            f"quant_compute=fp4 multiplies NVFP4 weights but quantize={quantize} stores none; set quantize=nvfp4, "
            "or quant_compute=fp8 (W8A8 for fp8 weights) or dequant"
        )
    if compute == "fp4" and quantize == "none" and not expert_files:
        raise ConfigError(
            "quant_compute=fp4 multiplies NVFP4 weights, but quantize=none keeps every weight in the run's dtype; "
            "add quantize=nvfp4 (or give NVFP4 expert files), or set quant_compute=dequant (or auto)"
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
