"""First-order flow-matching sampler: x ← x + (σ_next − σ)·v.

The same update as diffusers' `FlowMatchEulerDiscreteScheduler` (deterministic mode): computed
in float32 (float64 input stays float64), returned in the sample's dtype. diffusers casts the
result to the *model output's* dtype instead, which turns fp32 latents into bf16 when the
transformer runs in bf16; we keep the latents' dtype. The step size σ_next − σ is exact in
float64 for float32 sigmas and is rounded once when applied, as diffusers' float32 subtraction
rounds it, so in fp32 the two agree bit for bit.
"""

from __future__ import annotations

from .schedules import Schedule


class FlowEuler:
    """Euler over a schedule; stateless apart from the step counter that checks call order."""

    name = "euler"

    def __init__(self, schedule: Schedule):
        self.schedule = schedule
        self.reset()

    def reset(self) -> None:
        self._next_index = 0

    def step(self, model_output, sample, step_index: int, ops):
        if step_index != self._next_index:
            raise ValueError(
                f"FlowEuler.step expected step_index {self._next_index} but got {step_index}; "
                f"steps must run in order 0..{self.schedule.steps - 1} (call reset() to restart)."
            )
        sigmas = self.schedule.sigmas
        dt = float(sigmas[step_index + 1] - sigmas[step_index])
        out_dtype = ops.dtype_name(sample)
        compute = "float64" if out_dtype == "float64" else "float32"
        x = ops.cast(sample, compute) + ops.cast(model_output, compute) * dt
        self._next_index += 1
        return ops.cast(x, out_dtype)
