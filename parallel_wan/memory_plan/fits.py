"""Will this video fit — the model's positions and the device's memory? Decided during
validation, before anything loads (CLI) or is queued (server), so "far too large" is one line,
not an OOM kill minutes in.

Every size is checked against the planner's numbers, in up to three stages, cheapest first:
1. a floor every run needs — the decoded uint8 video of one prompt, which the main rank holds
   whole, plus the fp32 latents of every prompt: over the device → refused;
2. an upper bound of the planner's peak by arithmetic alone (bound.py; no torch): within the
   device → fits, and nothing else runs (the runs people start: microseconds, so a normal start
   is not slower and a server's HTTP process checks each request without importing torch);
3. otherwise the planner itself (report.plan: the run's code on meta tensors, 0.3–1 s plus
   torch's import), whose peak decides and whose verdict and suggestions the refusal quotes.
"""

from __future__ import annotations

import math

from ..config import ConfigError, RunSpec
from ..models.latent import latent_shape, video_frames
from ..models.rope import MAX_POSITIONS
from .host_memory import host_memory

GB = 1e9


def check_fits(spec: RunSpec, ckpt=None, budget: float | None = None, device: tuple | None = None) -> None:
    """Raise ConfigError when the video exceeds the model's RoPE positions or, by the planner's
    numbers, the memory of one device. `budget`: bytes per device (default: `device_memory`);
    `device`: what `device_memory` said, asked once before (a server's HTTP process checks every
    request against it and never touches a device)."""
    tcfg, vcfg = architecture_of(spec, ckpt)
    ss = vcfg.scale_factor_spatial
    pt, ph, pw = tcfg.patch_size
    video = spec.video
    latent = latent_shape(
        video.num_frames, video.height, video.width, tcfg.out_channels, vcfg, spec.model.variant.reference_frames
    )[2:]
    most = {
        "num_frames": video_frames(MAX_POSITIONS * pt, vcfg),
        "height": MAX_POSITIONS * ph * ss,
        "width": MAX_POSITIONS * pw * ss,
    }
    for (key, value), size in zip(
        (("num_frames", spec.video.num_frames), ("height", spec.video.height), ("width", spec.video.width)),
        (latent[0] // pt, latent[1] // ph, latent[2] // pw),
    ):
        if size > MAX_POSITIONS:
            raise ConfigError(
                f"{key}={value} gives {size} token positions along that axis but the model has "
                f"{MAX_POSITIONS} (RoPE); set {key} ≤ {most[key]}",
                setting=key,
            )
    if device is not None:
        budget, where = device
    elif budget is None:
        budget, where = device_memory(spec)
    else:
        where = "the given budget"
    if budget is None:
        return
    floor = (
        spec.video.num_frames * spec.video.height * spec.video.width * 3
        + len(spec.video.prompts) * tcfg.out_channels * math.prod(latent) * 4
    )
    if floor <= budget:
        from .bound import peak_bound

        if peak_bound(spec, tcfg, vcfg, _text_shape(spec, ckpt)) <= budget:
            return  # fits even by the generous bound: the planner is not needed
    from .report import plan, suggestions

    p = plan(spec)
    if p.peak <= budget:
        return
    size = f"num_frames={spec.video.num_frames} height={spec.video.height} width={spec.video.width}"
    raise ConfigError(
        f"{size} does not fit: the planner puts its peak at {p.peak / GB:.2f} GB per device but {where} "
        f"has {budget / GB:.2f} GB; try: {'; '.join(suggestions(p, budget))} "
        "(python -m parallel_wan.plan prints the whole plan)",
        setting=("num_frames", "height", "width"),
    )


def architecture_of(spec: RunSpec, ckpt):
    """(TransformerConfig, VaeConfig) of the run: the checkpoint's when described, else the registry's."""
    if ckpt is not None:
        return next(iter(ckpt.transformers.values())), ckpt.vae_config
    from ..models.registry import architecture

    arch = architecture(spec.model.architecture)
    return arch.transformer, arch.vae


def _text_shape(spec: RunSpec, ckpt):
    """The text encoder's shape without torch or a tokenizer: the checkpoint's config, else the
    registry's (the built-in model's vocabulary follows its tokenizer: a bound stands in)."""
    from ..models.registry import UMT5_XXL, architecture
    from ..text.encoder_shape import EncoderShape

    if ckpt is not None and ckpt.text_encoder_format == "diffusers":
        return EncoderShape.from_config_file(ckpt.text_encoder_path / "config.json")
    if ckpt is not None:
        return EncoderShape.from_config(UMT5_XXL)
    fields = dict(architecture(spec.model.architecture).text_encoder)
    fields.setdefault("vocab_size", 1 << 17)  # the tiny tokenizer's is far smaller
    return EncoderShape.from_config(fields)


def device_memory(spec: RunSpec) -> tuple[float | None, str]:
    """(bytes one device can hold, where that number comes from); None when unknown.

    A GPU: its total memory (nothing of this run is on it yet). The CPU: what new allocations get
    without swapping — the host's MemAvailable, or inside a container what its memory cgroup
    still allows when that is less (host_memory.py) — shared by the processes of this node
    (torchrun's LOCAL_WORLD_SIZE) or by JAX's virtual CPU devices, which all live in this one
    process's memory."""
    from ..backends.device_facts import accelerator_memory, cpu_sharers

    accelerator = accelerator_memory(spec.execution.backend, spec.execution.device)
    if accelerator is not None:
        return accelerator
    sharers = cpu_sharers(spec.execution.backend)
    host = host_memory()
    if host is None:
        return None, "host memory"
    return host.available / max(sharers, 1), host.where + (f" / {sharers} processes" if sharers > 1 else "")
