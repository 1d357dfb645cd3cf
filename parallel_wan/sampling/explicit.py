"""A schedule given as explicit sigmas or timesteps (`sigmas=[…]` / `timesteps=[…]`, the
few-step recipes), used as given: never shifted, the final sigma 0 appended after the last step.

How the given numbers become the sigmas a sampler steps with and the timesteps the transformer
sees follows each sampler's reference scheduler when it is handed explicit values with no shift
(diffusers `FlowMatchEulerDiscreteScheduler(shift=1).set_timesteps(sigmas=…|timesteps=…)`,
`UniPCMultistepScheduler(use_flow_sigmas=True, flow_shift=1).set_timesteps(sigmas=…)`):

- euler: sigmas rounded to float32; timesteps as given (float32), or float32 σ·1000 — not
  truncated, so the Lightning recipe's transformer sees 937.5 and 833.333 as the reference does.
- unipc, from sigmas: σ in float64, a first σ within 1e-6 of 1 nudged down by 1e-6 (UniPC takes
  log(1 − σ)), timesteps int(σ·1000) — what diffusers' UniPC and the official FlowUniPC do.
- unipc, from timesteps: no reference takes them; they are used as given (float32), σ = t/1000
  as for euler, with the same nudge.
"""

from __future__ import annotations

import numpy as np

from .schedules import _DIFFUSERS_FIRST_SIGMA_EPS, Schedule, _finish

EXPLICIT_KINDS = ("sigmas", "timesteps")


def explicit_schedule(sampler: str, sigmas=None, timesteps=None, num_train_timesteps: int = 1000) -> Schedule:
    """The schedule of exactly these `sigmas` (or `timesteps`, σ = t/T), one step each, for
    `sampler` ("euler" or "unipc"). The values are checked by config.resolve before any load."""
    if (sigmas is None) == (timesteps is None):
        raise ValueError("give exactly one of sigmas or timesteps")
    kind = "sigmas" if sigmas is not None else "timesteps"
    if sampler == "unipc" and sigmas is not None:
        sigmas64 = np.array(sigmas, np.float64)
        if np.fabs(sigmas64[0] - 1) < _DIFFUSERS_FIRST_SIGMA_EPS:
            sigmas64[0] -= _DIFFUSERS_FIRST_SIGMA_EPS
        return _finish(kind, 1.0, num_train_timesteps, sigmas64)
    if timesteps is not None:
        t32 = np.asarray(timesteps, np.float32)
        s32 = t32 / np.float32(num_train_timesteps)
    else:
        s32 = np.asarray(sigmas, np.float32)
        t32 = s32 * np.float32(num_train_timesteps)
    if sampler == "unipc" and np.fabs(float(s32[0]) - 1) < _DIFFUSERS_FIRST_SIGMA_EPS:
        s32 = s32.copy()
        s32[0] = np.float32(float(s32[0]) - _DIFFUSERS_FIRST_SIGMA_EPS)
    sigmas_out = np.concatenate([s32, np.zeros(1, np.float32)]).astype(np.float64)
    return Schedule(kind, 1.0, int(num_train_timesteps), sigmas_out, t32.astype(np.float64))
