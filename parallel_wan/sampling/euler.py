"""First-order flow-matching sampler: x ← x + (σ_next − σ)·v.

The same update as diffusers' `FlowMatchEulerDiscreteScheduler` (deterministic mode): computed
in float32 (float64 input stays float64), returned in the sample's dtype. diffusers casts the
result to the *model output's* dtype instead, which turns fp32 latents into bf16 when the
transformer runs in bf16; we keep the latents' dtype. The step size σ_next − σ is exact in
float64 for float32 sigmas and is rounded once when applied, as diffusers' float32 subtraction
rounds it, so in fp32 the two agree bit for bit. Euler keeps no state between steps.
"""

from __future__ import annotations

import numpy as np

from .schedules import Schedule

EULER_STATE: tuple[str, ...] = ()


def euler_table(schedule: Schedule, begin: int = 0) -> dict[str, np.ndarray]:
    """Every step's σ_next − σ, float64 (exact for the float32 sigmas); one-step, so the first
    step run (`begin`) changes nothing."""
    return {"dt": np.diff(schedule.sigmas)}


def euler_update(c, state, prediction, latents, ops):
    """One Euler step; `c` is one step of `euler_table` (a python float or a traced scalar)."""
    out_dtype = ops.dtype_name(latents)
    compute = "float64" if out_dtype == "float64" else "float32"
    x = ops.cast(latents, compute) + ops.cast(prediction, compute) * c["dt"]
    return ops.cast(x, out_dtype), state
