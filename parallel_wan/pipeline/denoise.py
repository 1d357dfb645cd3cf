"""The denoising loop, backend-agnostic: the host decides each step's expert and guidance; the
backend's noise predictor runs the forward (and the CFG combine); the sampler's elementwise
update runs on whatever layout the backend keeps the tokens in (a rank's shard, or a global
sharded array)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..config import RunSpec
from ..models import transformer as dit
from ..sampling import make_sampler, make_schedule, schedule_from_scheduler_config
from .checkpoint import HIGH, LOW, SINGLE
from .work import RankWork


@dataclass
class DenoiseTask:
    """What a backend needs to build its noise predictor (`backend.noise_predictor(task)` →
    `predict(expert, x, t, guidance)` → the guided prediction, float32, shaped like x)."""

    experts: dict  # name → (TransformerConfig, params placed on the backend)
    context: object  # (prompts + 1, text_len, text_dim): every prompt, then the negative prompt
    prompts: int
    work: RankWork
    grid: tuple[int, int, int]
    uses_guidance: bool
    per_token_timestep: bool  # TI2V-5B: one timestep per token (diffusers' expand_timesteps)
    cond_tokens: object | None = None  # I2V: (1, L, F) condition channels of this work's L tokens
    fixed_mask: np.ndarray | None = None  # TI2V image: (L, 1) host array, 0 where a token is held (t = 0)


@dataclass(frozen=True)
class Step:
    index: int
    t: float
    expert: str
    guidance: float
    prefetch: str | None = None  # memory=swap: start moving this expert to the device before this step
    release: str | None = None  # memory=swap: this expert's last step was the previous one; free it
    exchange: str | None = None  # memory=swap, swap_prefetch_steps=0: during this step, the last of its
    # expert, each block is freed once it has run and the same block of `exchange` is copied in


def pick_schedule(spec: RunSpec, ckpt):
    kind = spec.schedule
    if kind == "auto":
        kind = "diffusers" if ckpt.scheduler_config is not None else "official"
    if kind == "diffusers" and ckpt.scheduler_config is not None:
        return kind, schedule_from_scheduler_config(ckpt.scheduler_config, spec.steps, spec.shift)
    return kind, make_schedule(kind, spec.steps, spec.shift)


def expert_for(t: float, spec: RunSpec) -> str:
    if spec.model.experts == 1:
        return SINGLE
    return HIGH if t >= spec.model.boundary * 1000 else LOW


def step_plan(spec: RunSpec, schedule) -> list[Step]:
    """The host's decisions for every step: timestep, expert and its guidance scale."""
    plan = []
    for i, t in enumerate(schedule.timesteps):
        name = expert_for(float(t), spec)
        guidance = spec.guidance_low if name == LOW else spec.guidance_high
        plan.append(Step(i, float(t), name, guidance))
    if getattr(spec, "memory", "resident") == "swap":
        plan = _swap_marks(plan, spec.swap_prefetch_steps)
    return plan


def _swap_marks(plan: list[Step], prefetch_steps: int) -> list[Step]:
    """memory=swap: the low-noise copy starts `prefetch_steps` steps before the switch (so it
    overlaps the last high-noise steps), and the high-noise expert goes at the switch. With
    prefetch_steps=0 the last high-noise step exchanges the experts block by block instead: the
    device never holds more than one expert and a block or two."""
    switch = next((s.index for s in plan if s.expert == LOW), None)
    if switch is None:
        return plan
    plan = list(plan)
    if prefetch_steps == 0 and switch > 0:
        plan[switch - 1] = dataclasses.replace(plan[switch - 1], exchange=LOW)
    else:
        start = max(0, switch - prefetch_steps)
        plan[start] = dataclasses.replace(plan[start], prefetch=LOW)
    if switch > 0:
        plan[switch] = dataclasses.replace(plan[switch], release=HIGH)
    return plan


def denoise(spec: RunSpec, schedule, x, predict, progress, ops, held=None):
    """Every step on this controller's tokens x (B prompts × L tokens). `held` = (tokens,
    keep): TI2V's first-frame tokens and a (L, 1) device mask, 1 where denoised — held tokens
    are re-imposed before each step and once after the last."""
    sampler = make_sampler(spec.sampler, schedule)
    plan = step_plan(spec, schedule)
    # A predictor that moves weights between steps (memory=swap) says so with `before_step`.
    before_step = getattr(predict, "before_step", None)
    for i, _ in enumerate(progress(schedule.timesteps)):
        step = plan[i]
        if before_step is not None:
            before_step(step)
        if held is not None:
            x = ops.where(held[1] > 0, x, held[0])
        pred = predict(step.expert, x, step.t, step.guidance)
        x = sampler.step(pred, x, i, ops)
    if held is not None:
        x = ops.where(held[1] > 0, x, held[0])
    return x


def draw_noise(spec: RunSpec, rows, latent_shape, backend, patch_size):
    """Patch tokens of each prompt's noise, drawn as the official code draws it: a CPU
    generator seeded with the prompt's seed, float32. Every rank draws the same full noise
    (cheap, on the host) and keeps its slice, so the video does not depend on the mesh."""
    import torch

    ops = backend.ops
    noise = [torch.randn(latent_shape, generator=torch.Generator("cpu").manual_seed(spec.seed_of(r)),
                         dtype=torch.float32) for r in rows]
    return dit.patchify(backend.to_device(torch.cat(noise).numpy()), patch_size, ops)
