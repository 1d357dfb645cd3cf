"""The host's decisions for every step, made before the loop: the schedule, and per step its
timestep, expert, guidance scale and (memory=swap) the weight moves around it. The backends'
block runners read the moves through `predict.before_step(step)`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..caching.decisions import cache_plan
from ..config import ConfigError, RunSpec
from ..models.experts import HIGH, LOW
from ..parallel.cfg_rows import guides
from ..sampling import explicit_schedule, make_schedule, schedule_from_scheduler_config


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
    """(kind, Schedule): an explicit sigmas/timesteps list as given, else the `schedule=` kind's."""
    if spec.sampling.sigmas is not None or spec.sampling.timesteps is not None:
        schedule = explicit_schedule(spec.sampling.sampler, spec.sampling.sigmas, spec.sampling.timesteps)
        return schedule.kind, schedule
    kind = spec.sampling.schedule
    if kind == "auto":
        kind = "diffusers" if ckpt.scheduler_config is not None else "official"
    if kind == "diffusers" and ckpt.scheduler_config is not None:
        return kind, schedule_from_scheduler_config(ckpt.scheduler_config, spec.sampling.steps, spec.sampling.shift)
    return kind, make_schedule(kind, spec.sampling.steps, spec.sampling.shift)


def first_step(spec: RunSpec, schedule) -> int:
    """The first step run: 0, or with a source video (video-to-video) the step where `strength`
    of the schedule is left — diffusers' rule, steps − int(steps·strength)."""
    return begin_step(spec, schedule.steps)


def begin_step(spec: RunSpec, steps: int) -> int:
    """first_step for a schedule of `steps` steps."""
    if spec.video.video is None:
        return 0
    return steps - min(int(steps * spec.video.strength), steps)


def expert_for(t: float, spec: RunSpec) -> str:
    """The expert of the step at timestep t: a pair's high-noise one from the boundary up."""
    experts = spec.model.variant.experts
    if len(experts) == 1:
        return experts[0]
    high, low = experts
    return high if t >= spec.model.boundary * 1000 else low


def unguided_experts(spec: RunSpec) -> frozenset[str]:
    """The experts whose guidance is 1.0: no CFG in their steps, one forward row per prompt."""
    return frozenset(
        n
        for n in spec.model.variant.experts
        if not guides(spec.sampling.guidance_low if n == LOW else spec.sampling.guidance_high)
    )


def plan_record(plan: list[Step], schedule) -> list[dict]:
    """The sidecar's "steps_plan": per step its timestep, sigma, expert, guidance and whether
    CFG ran (a second, negative-prompt row)."""
    return [
        {
            "t": s.t,
            "sigma": float(schedule.sigmas[s.index]),
            "expert": s.expert,
            "guidance": s.guidance,
            "cfg": guides(s.guidance),
        }
        for s in plan
    ]


def step_plan(spec: RunSpec, schedule) -> list[Step]:
    """The host's decisions for every step: timestep, expert and its guidance scale."""
    plan = []
    for i, t in enumerate(schedule.timesteps):
        name = expert_for(float(t), spec)
        guidance = spec.sampling.guidance_low if name == LOW else spec.sampling.guidance_high
        plan.append(Step(i, float(t), name, guidance))
    if spec.memory.mode == "swap":
        plan = _swap_marks(plan, spec.memory.swap_prefetch_steps)
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


def step_cache_plan(spec: RunSpec, ckpt, plan: list[Step]) -> list | None:
    """The step cache's host decisions for every step (caching/decisions.py), or None (cache=none).
    A two-expert MagCache curve given as a plain list splits where this model's schedule
    switches experts when run for the curve's own number of steps (the calibration run).
    A curve that cannot serve this run raises ConfigError naming the file and the fix."""
    settings = spec.cache
    if not settings.on:
        return None
    split = None
    if (
        settings.kind == "magcache"
        and settings.curve is not None
        and settings.split is None
        and spec.model.experts == 2
    ):
        # the curve's own schedule: the model's, not an explicit few-step list
        steps = len(settings.curve) // 2 + 1
        calibration = spec.replace(steps=steps, sigmas=None, timesteps=None)
        _, schedule = pick_schedule(calibration, ckpt)
        split = sum(expert_for(float(t), spec) == HIGH for t in schedule.timesteps)
        if not 0 < split < steps:
            which = "high-noise" if split == steps else "low-noise"
            raise ConfigError(
                f"{_curve_setting(settings)} holds a curve of {len(settings.curve)} ratios, i.e. for a {steps}-step "
                f"run, and model={spec.model.name} runs all {steps} of those steps on its {which} expert, so the "
                "curve has no part for the other expert; calibrate a curve with as many steps as you run "
                f'(cache.calibrate=true steps={spec.sampling.steps}), or give the file a "split"',
                setting=("cache", "steps"),
            )
    experts = spec.model.variant.experts
    try:
        return cache_plan(
            settings,
            [step.expert for step in plan],
            split,
            experts if len(experts) == 2 else None,
            begin_step(spec, len(plan)),  # video-to-video: the cache decides from the first step run
        )
    except ValueError as exc:
        raise ConfigError(
            f"{_curve_setting(settings)} cannot serve this run of {spec.sampling.steps} steps: {exc}"
        ) from None


def _curve_setting(settings) -> str:
    return f"cache.ratios={settings.ratios}" if settings.ratios else f"cache=magcache (curve {settings.curve_name})"


def check_step_plan(spec: RunSpec, ckpt) -> None:
    """Build this run's schedule, step plan and step-cache plan now, on the host, so that a cache
    curve that does not fit the run's steps or expert split stops the run before anything loads.
    `ckpt` None: the built-in tiny model, whose checkpoint will carry TINY_SCHEDULER_CONFIG."""
    if not spec.cache.on:
        return
    if ckpt is None:
        from types import SimpleNamespace

        from ..builtin.scheduler import TINY_SCHEDULER_CONFIG

        ckpt = SimpleNamespace(scheduler_config=TINY_SCHEDULER_CONFIG)
    _, schedule = pick_schedule(spec, ckpt)
    step_cache_plan(spec, ckpt, step_plan(spec, schedule))
