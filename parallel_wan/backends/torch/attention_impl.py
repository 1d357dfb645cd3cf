"""attention_impl against the machine, before anything loads: can the kernel a run names run
here — CUDA, the GPU's generation, the package, the dtype, the model's head_dim? One line
naming the setting, the value and the fix when not (backends/process.py raises it as a
ConfigError, exit 2; the doctor prints it). auto never fails here: it falls back at run time."""

from __future__ import annotations

import torch

from .attention import _HALF, _has_flash_attn, _has_flash_attn3
from .sage_attention import sage_unavailable_reason


def unavailable_reason(impl: str, device: torch.device, head_dim: int, dtype: torch.dtype) -> str | None:
    """Why attention_impl=`impl` cannot run a model of `head_dim` in `dtype` on `device`, or None
    when it can: asked before anything loads (backends/process.py check_device), so a run that
    cannot use the kernel it names stops in one line. auto always runs (it falls back)."""
    if impl in ("auto", "sdpa"):
        return None
    if impl == "sage":  # (sage_attention.py imports no triton: only a sage launch does)
        return sage_unavailable_reason(device, head_dim, dtype)
    if device.type != "cuda":
        return f"attention_impl={impl} runs on CUDA GPUs, not {device.type}; use attention_impl=auto"
    major, minor = torch.cuda.get_device_capability(device)
    if dtype not in _HALF:
        return (
            f"attention_impl={impl} runs dtype=bfloat16 or float16, not {str(dtype).removeprefix('torch.')}; "
            "set dtype=bfloat16 or use attention_impl=auto"
        )
    if impl == "cudnn" and major < 8:
        return f"attention_impl=cudnn needs an sm_80 or newer GPU, this is sm_{major}{minor}; use attention_impl=auto"
    if impl == "flash":
        if not (_has_flash_attn() or major == 9 and _has_flash_attn3()):
            return (
                "attention_impl=flash needs flash-attn (3 on Hopper, or 2): pip install flash-attn "
                "--no-build-isolation, or use attention_impl=auto"
            )
        if major < 8:
            return (
                f"attention_impl=flash needs an sm_80 or newer GPU, this is sm_{major}{minor}; use attention_impl=auto"
            )
    if head_dim % 8 or head_dim > 256:
        return (
            f"attention_impl={impl} runs head_dim ≤ 256 in multiples of 8, this model has {head_dim}; "
            "use attention_impl=auto"
        )
    return None
