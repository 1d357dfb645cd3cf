"""Flow-matching noise schedules: the sigmas a sampler steps through and the timesteps the
transformer sees, reproduced bit for bit from the two reference implementations.

Both references shift a linear ramp with `shift*s / (1 + (shift-1)*s)` and truncate `sigma*1000`
to integer timesteps; they differ only in the ramp:

- "official" (Wan 2.2 `FlowUniPCMultistepScheduler`, built with shift=1 and then
  `set_timesteps(steps, shift=shift)`): ramp `linspace(σ_max, 0, N+1)[:-1]`, where σ_max is the
  float32 value of 1 - 1/1000 taken from its training table (0.99900001287…).
- "diffusers" (`UniPCMultistepScheduler(use_flow_sigmas=True, flow_shift=shift)`): ramp
  `linspace(1, 1/1000, N+1)[:-1]`; a first sigma of exactly 1 is nudged down by 1e-6 (UniPC
  takes log(1 - σ)).

The two differ by up to 0.0073 in sigma at shift 12 / 40 steps, enough to move a step across
the expert boundary in other settings, so which one a run uses is an explicit choice.

Every number here is computed on the host in float64 numpy with the same operation order as
the references, then rounded to float32 where they round, so equality with them is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .diffusers_flags import check_diffusers_unipc_flags

SCHEDULE_KINDS = ("official", "diffusers")

# diffusers keeps sigma_0 away from 1 by this much so that log(1 - σ) stays finite.
_DIFFUSERS_FIRST_SIGMA_EPS = 1e-6


@dataclass(frozen=True, eq=False)
class Schedule:
    """One generation's noise schedule.

    sigmas: float64, length steps+1, strictly decreasing, last entry 0. They are the float32
        values the references step with (stored exactly in float64), so a sampler computing its
        coefficients from them in float64 sees the references' schedule, not a nearby one.
    timesteps: length steps; exactly what the reference passes to the transformer at each step
        (int64 for both UniPC schedules: `int(sigma * num_train_timesteps)`, truncated).
    """

    kind: str
    shift: float
    num_train_timesteps: int
    sigmas: np.ndarray
    timesteps: np.ndarray

    def __post_init__(self) -> None:
        if self.sigmas.ndim != 1 or len(self.sigmas) != len(self.timesteps) + 1:
            raise ValueError(
                f"Schedule needs steps+1 sigmas for steps timesteps; got {len(self.sigmas)} sigmas "
                f"and {len(self.timesteps)} timesteps."
            )
        if self.sigmas[-1] != 0.0 or np.any(np.diff(self.sigmas) >= 0):
            raise ValueError(f"Schedule sigmas must decrease strictly and end at 0; got {self.sigmas.tolist()}.")
        self.sigmas.setflags(write=False)
        self.timesteps.setflags(write=False)

    @property
    def steps(self) -> int:
        return len(self.timesteps)


def _shift_sigmas(ramp: np.ndarray, shift: float) -> np.ndarray:
    # Same expression and evaluation order as both references, so the float64 results (and the
    # integer truncation of sigma*1000 that follows) agree to the last bit.
    return shift * ramp / (1 + (shift - 1) * ramp)


def _finish(kind: str, shift: float, num_train_timesteps: int, sigmas64: np.ndarray) -> Schedule:
    # The references truncate float64 sigma*T to int64 and step with float32 sigmas.
    timesteps = (sigmas64 * num_train_timesteps).astype(np.int64)
    sigmas = np.concatenate([sigmas64, [0.0]]).astype(np.float32).astype(np.float64)
    return Schedule(kind, float(shift), int(num_train_timesteps), sigmas, timesteps)


def official_schedule(steps: int, shift: float, num_train_timesteps: int = 1000) -> Schedule:
    """Wan 2.2's default `unipc` schedule, as `wan/text2video.py` builds it."""
    # The official scheduler's training table is `1 - linspace(1, 1/T, T)[::-1]` stored in
    # float32; its first entry, 1 - 1/T, becomes the top of the inference ramp.
    sigma_max = float(np.float32(1.0 - 1.0 / num_train_timesteps))
    ramp = np.linspace(sigma_max, 0.0, steps + 1)[:-1]
    return _finish("official", shift, num_train_timesteps, _shift_sigmas(ramp, shift))


def diffusers_schedule(steps: int, shift: float, num_train_timesteps: int = 1000) -> Schedule:
    """diffusers' `UniPCMultistepScheduler(use_flow_sigmas=True, flow_shift=shift)` schedule."""
    ramp = np.linspace(1.0, 1.0 / num_train_timesteps, steps + 1)[:-1]
    sigmas = _shift_sigmas(ramp, shift)
    if np.fabs(sigmas[0] - 1) < _DIFFUSERS_FIRST_SIGMA_EPS:
        sigmas[0] -= _DIFFUSERS_FIRST_SIGMA_EPS
    return _finish("diffusers", shift, num_train_timesteps, sigmas)


def make_schedule(kind: str, steps: int, shift: float, num_train_timesteps: int = 1000, **diffusers_flags) -> Schedule:
    """The schedule of `kind` ("official" or "diffusers") for `steps` steps at `shift`.

    `diffusers_flags` are diffusers `UniPCMultistepScheduler` config entries (e.g.
    `final_sigmas_type="zero"`); they are checked, and any we do not reproduce is refused.
    """
    if kind not in SCHEDULE_KINDS:
        raise ValueError(f"schedule kind {kind!r} is unknown; use one of {SCHEDULE_KINDS}.")
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be a positive integer; got {steps!r}.")
    if not shift > 0:
        raise ValueError(f"shift must be positive; got {shift!r}.")
    if diffusers_flags:
        if kind != "diffusers":
            raise ValueError(
                f"diffusers scheduler flags {sorted(diffusers_flags)} were given for the "
                f"{kind!r} schedule; they only apply to kind='diffusers'."
            )
        check_diffusers_unipc_flags(diffusers_flags)
    build = official_schedule if kind == "official" else diffusers_schedule
    return build(int(steps), shift, num_train_timesteps)


# ---------------------------------------------------------------- expert boundary
def is_high_noise_step(schedule: Schedule, step_index: int, boundary: float) -> bool:
    """Whether step `step_index` belongs to the high-noise expert.

    Both references compare the integer timestep with `boundary * num_train_timesteps`
    (`t >= 875.0` for T2V-A14B), inclusive.
    """
    return bool(schedule.timesteps[step_index] >= boundary * schedule.num_train_timesteps)


def count_high_noise_steps(schedule: Schedule, boundary: float) -> int:
    """How many leading steps run the high-noise expert (T2V-A14B, official 40-step shift-12
    schedule, boundary 0.875: 26; I2V-A14B, shift 5, boundary 0.9: 15)."""
    high = [is_high_noise_step(schedule, i, boundary) for i in range(schedule.steps)]
    count = sum(high)
    # Timesteps decrease, so the high-noise steps are a prefix; the orchestrator relies on
    # switching experts exactly once.
    assert all(high[:count]) and not any(high[count:]), high
    return count
