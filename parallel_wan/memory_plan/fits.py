"""Will this video fit — the model's positions and the device's memory? Decided during
validation, before anything loads, so "far too large" is one line, not a traceback minutes in.

The memory check is two-stage because the planner costs seconds (it runs the model on meta
tensors): a floor every run needs — the decoded uint8 video of one prompt, which the main rank
holds whole, plus the fp32 latents of every prompt — is compared first, and only a video whose
floor already exceeds the device runs the planner, whose verdict and suggestions the refusal
quotes. A video that fits the floor but not the planner's peak is left to the run (and to
`python -m parallel_wan.plan`, which reports it in full).
"""

from __future__ import annotations

import math
import os

from ..config import ConfigError, RunSpec
from ..models.rope import MAX_POSITIONS

GB = 1e9
# The planner builds each rank's RoPE tables for real (tokens × head_dim floats) and runs the
# step on meta tensors: fine at any real video size (720p × 81 frames is 75k tokens), but for a
# video of millions of tokens it would itself take minutes and gigabytes. Beyond this many
# tokens per rank the floor alone is the verdict.
PLANNER_TOKENS = 300_000


def check_fits(spec: RunSpec, ckpt=None, budget: float | None = None, device: tuple | None = None) -> None:
    """Raise ConfigError when the video exceeds the model's RoPE positions or, by the planner's
    numbers, the memory of one device. `budget`: bytes per device (default: `device_memory`);
    `device`: what `device_memory` said, asked once before (a server's HTTP process checks every
    request against it and never touches a device)."""
    tcfg, vcfg = _architecture(spec, ckpt)
    st, ss = vcfg.scale_factor_temporal, vcfg.scale_factor_spatial
    pt, ph, pw = tcfg.patch_size
    latent = ((spec.video.num_frames - 1) // st + 1, spec.video.height // ss, spec.video.width // ss)
    most = {"num_frames": (MAX_POSITIONS * pt - 1) * st + 1, "height": MAX_POSITIONS * ph * ss,
            "width": MAX_POSITIONS * pw * ss}
    for (key, value), size in zip((("num_frames", spec.video.num_frames), ("height", spec.video.height), ("width", spec.video.width)),
                                  (latent[0] // pt, latent[1] // ph, latent[2] // pw)):
        if size > MAX_POSITIONS:
            raise ConfigError(f"{key}={value} gives {size} token positions along that axis but the model has "
                              f"{MAX_POSITIONS} (RoPE); set {key} ≤ {most[key]}")
    if device is not None:
        budget, where = device
    elif budget is None:
        budget, where = device_memory(spec)
    else:
        where = "the given budget"
    if budget is None:
        return
    floor = spec.video.num_frames * spec.video.height * spec.video.width * 3 + len(spec.video.prompts) * tcfg.out_channels * math.prod(latent) * 4
    if floor <= budget:
        return
    size = f"num_frames={spec.video.num_frames} height={spec.video.height} width={spec.video.width}"
    need, tries = f"its frames and latents alone need {floor / GB:.2f} GB", ["smaller height/width/num_frames"]
    tokens = (latent[0] // pt) * (latent[1] // ph) * (latent[2] // pw) // spec.mesh.cp
    if tokens <= PLANNER_TOKENS:
        from .report import plan, suggestions

        p = plan(spec)
        need, tries = f"the planner puts its peak at {p.peak / GB:.2f} GB", suggestions(p, budget)
    raise ConfigError(f"{size} does not fit: {need} per device but {where} has {budget / GB:.2f} GB; "
                      f"try: {'; '.join(tries)}")


def _architecture(spec: RunSpec, ckpt):
    if ckpt is not None:
        return next(iter(ckpt.transformers.values())), ckpt.vae_config
    from ..models.registry import for_task

    arch = for_task(spec.model.task, bool(spec.model.builtin))
    return arch.transformer, arch.vae


def device_memory(spec: RunSpec) -> tuple[float | None, str]:
    """(bytes one device can hold, where that number comes from); None when unknown.

    A GPU: its total memory (nothing of this run is on it yet). The CPU: the host's
    MemAvailable — what new allocations get without swapping — shared by the processes of this
    node (torchrun's LOCAL_WORLD_SIZE) or by JAX's virtual CPU devices, which all live in this
    one process's memory."""
    if spec.execution.backend == "torch":
        import torch

        if spec.execution.device != "cpu" and torch.cuda.is_available():
            index = torch.device(spec.execution.device).index if spec.execution.device.startswith("cuda:") else 0
            return float(torch.cuda.get_device_properties(index).total_memory), f"cuda:{index}"
        sharers = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    else:
        import jax

        from ..backends.jax.backend import visible_devices

        device = visible_devices(spec.execution.device)[0]
        if device.platform != "cpu":
            limit = (device.memory_stats() or {}).get("bytes_limit")
            return (float(limit) if limit else None), f"{device.platform}:{device.id}"
        sharers = len(jax.local_devices(backend="cpu"))
    available = _mem_available()
    if available is None:
        return None, "host memory"
    return available / max(sharers, 1), f"host memory (MemAvailable{f' / {sharers} processes' if sharers > 1 else ''})"


def _mem_available() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return None
