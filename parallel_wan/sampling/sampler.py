"""A sampler is data plus one function: a per-step coefficient table computed on the host from
the schedule, and `update(coefs, state, prediction, latents, ops) -> (latents, state)` written
once against the `ops` namespace. The eager loops (torch, JAX) pass one table row of python
floats per step; JAX's `lax.scan` passes the float32 table and scans over it. The state between
steps is a dict of named arrays (None until filled), so a loop can stop after any step, save
it, and resume.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .euler import EULER_STATE, euler_table, euler_update
from .schedules import Schedule
from .unipc import UNIPC_STATE, unipc_table, unipc_update

# name → (table builder, update, state names)
SAMPLERS = {
    "unipc": (unipc_table, unipc_update, UNIPC_STATE),
    "euler": (euler_table, euler_update, EULER_STATE),
}


@dataclass(frozen=True, eq=False)
class Sampler:
    name: str
    schedule: Schedule
    table: Mapping[str, np.ndarray]  # column → float64 value per step
    update: Callable  # (coefs, state, prediction, latents, ops) -> (latents, state)
    state_names: tuple[str, ...]

    @property
    def steps(self) -> int:
        return self.schedule.steps

    def initial_state(self) -> dict[str, Any]:
        """The state before step 0: nothing kept yet."""
        return {name: None for name in self.state_names}

    def coefs(self, index: int) -> dict[str, float]:
        """Step `index`'s row as python floats: the eager update multiplies float32 arrays by them
        as float32 (float64 arrays as float64), and decides its branches on the host."""
        if not 0 <= index < self.steps:
            raise IndexError(f"step {index} is outside the schedule's {self.steps} steps")
        return {k: float(v[index]) for k, v in self.table.items()}

    def float32_table(self, start: int = 0, stop: int | None = None) -> dict[str, np.ndarray]:
        """Rows [start, stop) rounded to float32 once, for `lax.scan`: the same values the
        eager float32 update rounds each python float to."""
        return {k: v[start:stop].astype(np.float32) for k, v in self.table.items()}

    def step(self, state, prediction, latents, index: int, ops):
        """Step `index` eagerly: (latents, state) after it."""
        return self.update(self.coefs(index), state, prediction, latents, ops)


def make_sampler(name: str, schedule: Schedule, begin: int = 0) -> Sampler:
    """The sampler `name` ("unipc", the Wan 2.2 default, or "euler") over `schedule`, its first
    step `begin` (video-to-video starts part-way, with no history: a multistep solver warms up
    there as at step 0, as diffusers' schedulers do when their timesteps are cut)."""
    if name not in SAMPLERS:
        raise ValueError(f"sampler {name!r} is unknown; use one of {sorted(SAMPLERS)}.")
    build, update, state_names = SAMPLERS[name]
    return Sampler(name, schedule, build(schedule, begin), update, state_names)
