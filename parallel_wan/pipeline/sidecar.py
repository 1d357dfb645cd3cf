"""The record of one generation (the sidecar's `info`, written beside the video as video.json):
built from what ran — the checkpoint, the schedule, the shapes and shards, the kernels and the
step cache — after the run, so generate.py only gathers the facts.

The keys, their order and their values are what sidecars have always held (jobs resume by
them and tests compare them): add a key at the end, never reorder."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import RunSpec
from ..parallel.shards import SequenceShards
from .checkpoint import architecture_record
from .steps import plan_record, step_plan


@dataclass(frozen=True)
class Ran:
    """What one generation ran, as the sidecar records it."""

    ckpt: object  # the checkpoint as loaded (pipeline/checkpoint.py): its layout, configs, expert files
    schedule_kind: str
    schedule: object  # the sampling schedule: its timesteps and sigmas
    latent_shape: tuple
    shards: SequenceShards  # how the tokens were split over the ranks
    head_dim: int  # the transformer's attention head dim (which kernel ran depends on it)
    compiled: dict  # what was compiled ahead (JAX) and how long it took; {} when nothing was
    loras: dict | None  # expert → the LoRA applied to it (None: none)
    cache: dict | None  # the step cache's report; None: no cache
    image: dict | None  # the first frame's record; None: no image
    sparse: dict | None = None  # sparse attention's report (settings, density, FLOPs skipped); None: dense


def segmented_info(spec: RunSpec, backend, ckpt, schedule_kind, schedule, shape, work, tcfg, loras, image) -> dict:
    """sidecar_info of a run made segment by segment (Animate, S2V): no step cache, nothing
    compiled ahead; `shape` and `work` are one segment's."""
    ran = Ran(
        ckpt=ckpt,
        schedule_kind=schedule_kind,
        schedule=schedule,
        latent_shape=shape,
        shards=work.shards,
        head_dim=tcfg.attention_head_dim,
        compiled={},
        loras=loras,
        cache=None,
        image=image,
    )
    return sidecar_info(spec, backend, ran)


def sidecar_info(spec: RunSpec, backend, ran: Ran) -> dict:
    """The sidecar's `info` for `spec` run on `backend`."""
    plan = step_plan(spec, ran.schedule)
    steps_per_expert = {}
    for step in plan:
        steps_per_expert[step.expert] = steps_per_expert.get(step.expert, 0) + 1
    info = {
        "checkpoint": {
            "layout": ran.ckpt.layout,
            "path": spec.weights.checkpoint_dir or "built-in tiny model",
            "architecture": architecture_record(spec, ran.ckpt),
        },  # the checkpoint's configs, which won
        "schedule": ran.schedule_kind,
        "timesteps": [float(t) for t in ran.schedule.timesteps],
        "sigmas": [float(s) for s in ran.schedule.sigmas],  # steps + 1: the last is 0
        "steps_per_expert": steps_per_expert,
        "steps_plan": plan_record(plan, ran.schedule),
        "latent_shape": list(ran.latent_shape),
        "device": str(backend.device),
        "mesh": {
            **spec.mesh.to_dict(),
            "tokens": ran.shards.tokens,
            "tokens_per_rank": ran.shards.local,
            "padding": ran.shards.padding,
        },
        # the path quantized layers take on this device
        "quantization": {
            "quantize": spec.quantization.quantize,
            "quant_compute": spec.quantization.compute,
            "chosen": backend.quant_compute,
        },
        # attention_impl as set (auto …) and the kernel it resolved to on this device
        "attention": {
            "attention_impl": spec.execution.attention_impl,
            "kernel": backend.attention_kernel(spec.execution.dtype, ran.head_dim),
        },
    }
    if ran.compiled:
        info["compile"] = ran.compiled
    if ran.ckpt.expert_files:  # experts from one file each (weights_high= …): where, format, stored dtype
        info["expert_files"] = {name: file.record() for name, file in ran.ckpt.expert_files.items()}
    if ran.loras and any(ran.loras.values()):
        info["lora"] = {name: lora.record() for name, lora in ran.loras.items() if lora is not None}
    if ran.cache is not None:
        info["cache"] = ran.cache
    if ran.image is not None:
        info["image"] = ran.image
    info["videos"] = [{"prompt": p, "seed": spec.video.seed_of(i)} for i, p in enumerate(spec.video.prompts)]
    if ran.sparse is not None:
        info["sparse"] = ran.sparse
    return info
