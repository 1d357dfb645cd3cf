"""Flow-matching samplers and their noise schedules, backend-agnostic.

    schedule = make_schedule("official", steps=40, shift=12.0)
    sampler = make_sampler("unipc", schedule)
    for i, t in enumerate(schedule.timesteps):
        v = model(latents, t)                       # any backend, any shard of the tokens
        latents = sampler.step(v, latents, i, ops)

A sampler's update is elementwise with host-computed float64 coefficients, so each rank can
run it on its own sequence shard with a sampler instance of its own, and the shards
concatenate to exactly the whole-array result.
"""

from __future__ import annotations

from typing import Any, Protocol

from .euler import FlowEuler
from .scheduler_config import schedule_from_scheduler_config
from .schedules import (
    Schedule,
    count_high_noise_steps,
    diffusers_schedule,
    is_high_noise_step,
    make_schedule,
    official_schedule,
)
from .unipc import FlowUniPC


class Sampler(Protocol):
    name: str
    schedule: Schedule

    def reset(self) -> None: ...

    def step(self, model_output: Any, sample: Any, step_index: int, ops: Any) -> Any: ...


SAMPLERS = {"unipc": FlowUniPC, "euler": FlowEuler}


def make_sampler(name: str, schedule: Schedule) -> Sampler:
    """A fresh sampler ("unipc", the Wan 2.2 default, or "euler") over `schedule`."""
    if name not in SAMPLERS:
        raise ValueError(f"sampler {name!r} is unknown; use one of {sorted(SAMPLERS)}.")
    return SAMPLERS[name](schedule)


__all__ = [
    "FlowEuler",
    "FlowUniPC",
    "SAMPLERS",
    "Sampler",
    "Schedule",
    "count_high_noise_steps",
    "diffusers_schedule",
    "is_high_noise_step",
    "make_sampler",
    "make_schedule",
    "official_schedule",
    "schedule_from_scheduler_config",
]
