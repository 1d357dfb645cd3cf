"""Flow-matching samplers and their noise schedules, backend-agnostic.

    schedule = make_schedule("official", steps=40, shift=12.0)
    sampler = make_sampler("unipc", schedule)
    state = sampler.initial_state()
    for i, t in enumerate(schedule.timesteps):
        v = model(latents, t)                       # any backend, any shard of the tokens
        latents, state = sampler.step(state, v, latents, i, ops)

A sampler's update is elementwise with host-computed float64 coefficients, so each rank can
run it on its own sequence shard with a state of its own, and the shards concatenate to
exactly the whole-array result. The state is explicit, so a loop can start at any step.

euler.py / unipc.py   each sampler's coefficient table and update
sampler.py            `Sampler` (table + update + state names) and `make_sampler`
schedules.py          the sigmas and timesteps; the expert boundary
explicit.py           a schedule given as explicit sigmas or timesteps (few-step recipes)
scheduler_config.py   diffusers' scheduler_config.json → Schedule
diffusers_flags.py    the diffusers scheduler settings we reproduce, and the check
"""

from __future__ import annotations

from .diffusers_flags import check_diffusers_unipc_flags
from .euler import euler_update
from .explicit import EXPLICIT_KINDS, explicit_schedule
from .sampler import SAMPLERS, Sampler, make_sampler
from .scheduler_config import schedule_from_scheduler_config
from .schedules import (
    Schedule,
    count_high_noise_steps,
    diffusers_schedule,
    is_high_noise_step,
    make_schedule,
    official_schedule,
)
from .unipc import unipc_update

__all__ = [
    "EXPLICIT_KINDS",
    "SAMPLERS",
    "Sampler",
    "Schedule",
    "check_diffusers_unipc_flags",
    "count_high_noise_steps",
    "diffusers_schedule",
    "euler_update",
    "explicit_schedule",
    "is_high_noise_step",
    "make_sampler",
    "make_schedule",
    "official_schedule",
    "schedule_from_scheduler_config",
    "unipc_update",
]
