"""quant_compute=fp8 on PyTorch: a block linear with an fp8 weight multiplies in FP8 (W8A8, as
LightX2V's and SGLang's FP8 paths do), and which of the two quantized paths a run takes.

Per call: each row (token) of x gets its own scale, absmax / 448 (an all-zero row: 1); x / scale
is cast to float8_e4m3fn (round to nearest); `torch._scaled_mm` multiplies the fp8 operands with
float32 accumulation and applies scale_a (M, 1) and the weight's per-channel scale_b (1, N) to
the result, in the run's dtype. The layouts are what cuBLASLt's FP8 kernel requires: A row-major
(M, K), B column-major — the (N, K) weight's `.t()`, a view, no copy — and both scales float32.
Nothing reads a value back to the host, so no layer waits for the device.

Only a weight stored as float8 with one scale per output channel (G = 1: quantize=fp8,
LightX2V's fp8, Kijai's per-tensor scale expanded to rows) takes this path; an int8 or per-block
(G > 1) weight is widened as under dequant (`ops.dense`) — said once in the log when the choice
is made. Under quant_compute=fp4 an NVFP4 weight multiplies in FP4 on CUDA sm_100+ (fp4_gemm.py) and is widened
elsewhere. `ops_for(choice)` is the ops namespace the backend hands the model: torch's ops with
`dense` replaced; the model never knows.
"""

from __future__ import annotations

import logging
import types

import torch

from ...weights.quantized.nvfp4 import is_nvfp4
from ...weights.quantized.scales import FP8_MAX, row_scales
from . import ops as torch_ops
from .fp4_gemm import fp4_supported, nvfp4_dense

log = logging.getLogger("parallel_wan")

FP8 = torch.float8_e4m3fn
FP8_CAPABILITY = (8, 9)  # Ada (sm_89), Hopper (sm_90), Blackwell (sm_100): FP8 tensor cores


def activation_scales(x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x quantized to float8_e4m3fn, its float32 per-row scales (M, 1)) for a 2-D x."""
    scale = row_scales(x2, FP8_MAX)  # the weights' per-row rule, per token
    q = (x2.to(torch.float32) / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return q, scale


def fp4_dense(x: torch.Tensor, layer: dict) -> torch.Tensor:
    """`ops.dense` for quant_compute=fp4: an NVFP4 weight multiplied in FP4 (W4A4, fp4_gemm.py),
    anything else as under quant_compute=fp8."""
    if is_nvfp4(layer["weight"], layer.get("weight_scale")):
        return nvfp4_dense(x, layer)
    return fp8_dense(x, layer)


def fp8_dense(x: torch.Tensor, layer: dict) -> torch.Tensor:
    """`ops.dense` for quant_compute=fp8: W8A8 through `torch._scaled_mm` for an fp8 weight with
    a per-channel scale, the widening path for anything else (NVFP4 weights included: W4A16)."""
    w, scale = layer["weight"], layer.get("weight_scale")
    if scale is None or w.dtype != FP8 or scale.shape[-1] != 1:
        return torch_ops.dense(x, layer)
    lead, k = x.shape[:-1], x.shape[-1]
    xq, x_scale = activation_scales(x.reshape(-1, k))
    out = torch._scaled_mm(xq, w.t(), scale_a=x_scale, scale_b=scale.reshape(1, -1), out_dtype=x.dtype)
    bias = layer.get("bias")
    if bias is not None:
        out = out + bias
    return out.reshape(*lead, w.shape[0])


def fp8_supported(device: torch.device) -> bool:
    """FP8 GEMMs run here: a CUDA device of compute capability 8.9 or newer."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= FP8_CAPABILITY


def choose(setting: str, device: torch.device, compiled: bool = False) -> str:
    """quant_compute's choice on this device: "fp8" | "fp4" | "dequant" (fp4 only when asked).
    auto → fp8 where FP8 GEMMs run AND the blocks are compiled; dequant otherwise. Measured on
    an H200 (A14B blocks, 18,880 tokens; BENCHMARKS.md "Quantized weights on a GPU"): compiled,
    W8A8 takes 0.81× the bf16 time (the per-token activation quantization fuses into generated
    kernels) and dequant 1.02×; eager, the quantization's separate passes make W8A8 1.12–1.24× and dequant 1.08–1.19×.
    An explicit fp8 also runs on the CPU (torch._scaled_mm has a CPU kernel: the tests' path);
    on an older GPU it is refused, naming the device."""
    if setting == "auto":
        return "fp8" if fp8_supported(device) and compiled else "dequant"
    if setting == "fp4" and device.type == "cuda" and not fp4_supported(device):
        from ...errors import ConfigError

        major, minor = torch.cuda.get_device_capability(device)
        raise ConfigError(
            f"quant_compute=fp4 needs a GPU with FP4 tensor cores (sm_100 or newer) but {device} is "
            f"sm_{major}{minor}; set quant_compute=fp8 (NVFP4 weights widened) or dequant"
        )
    if setting == "fp8" and device.type == "cuda" and not fp8_supported(device):
        from ...errors import ConfigError

        major, minor = torch.cuda.get_device_capability(device)
        raise ConfigError(
            f"quant_compute=fp8 needs a GPU with FP8 tensor cores (sm_89 or newer) but {device} is "
            f"sm_{major}{minor}; set quant_compute=dequant (or auto)"
        )
    return setting


def ops_for(choice: str):
    """The ops namespace for a choice: torch's own for dequant, a copy with `dense` = fp8_dense."""
    if choice not in ("fp8", "fp4"):
        return torch_ops
    names = {k: getattr(torch_ops, k) for k in dir(torch_ops) if not k.startswith("__")}
    dense = fp4_dense if choice == "fp4" else fp8_dense
    return types.SimpleNamespace(**{**names, "dense": dense, "__doc__": f"torch ops, {choice} GEMMs (fp8_gemm.py)"})


def log_choice(setting: str, choice: str, device: torch.device) -> None:
    if choice in ("fp8", "fp4"):
        log.info(
            "quant_compute=%s → %s on %s: fp8 weights with one scale per output channel multiply in FP8 "
            "(per-token activation scales); NVFP4 weights %s; int8 or per-block weights are widened as they run",
            setting,
            choice,
            device,
            "multiply in FP4 (W4A4)"
            if choice == "fp4"
            else "are widened (W4A16; quant_compute=fp4 multiplies them in FP4)",
        )
    else:
        why = (
            " (eager: FP8 GEMMs pay off only with compile=true, where the activations' quantization fuses)"
            if setting == "auto" and fp8_supported(device)
            else ""
        )
        log.info(
            "quant_compute=%s → dequant on %s: quantized weights are widened to the run's dtype as each layer runs%s",
            setting,
            device,
            why,
        )
