"""UniPC for flow matching (Wan 2.2's default `unipc` sampler), split into host and device parts.

The solver is the one both references run: UniPC (Zhao et al. 2023, arXiv:2302.04867) with
solver order 2, B(h) = e^h - 1 ("bh2"), data prediction (the model's velocity v is turned into
x0 = x - σ·v), the UniC corrector on every step after the first, order 1 on the first step
(warm-up) and on the last step ("lower_order_final"), final sigma 0. With α = 1 - σ and
λ = log(α/σ), one step from σ_s to σ_t is, for order p:

    x_t = (σ_t/σ_s)·x - α_t·(e^-h - 1)·m0 - α_t·B(h)·Σ_k ρ_k·D_k,    h = λ_t - λ_s,

D_k being divided differences of earlier x0 predictions. Only the scalar coefficients depend
on the step, so they are computed here on the host in float64 from the schedule; the arrays
only see `+`, `-` and `*` by python floats. That is what lets the orchestrator run the update
on each rank's sequence shard (and JAX trace it) with results identical to the whole-array
update.

The references compute the same coefficients in float32 torch scalars; in fp32 our trajectory
therefore differs from theirs at the ~1e-7 relative level per step (their rounding, mostly in
h = λ_t - λ_s), while in float64 the two agree to rounding (tests/test_sampling.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .schedules import Schedule

SOLVER_ORDER = 2


def _log_snr(sigma: float) -> float:
    """λ = log(α) - log(σ) for the flow path α = 1 - σ (0 < σ < 1)."""
    return math.log(1.0 - sigma) - math.log(sigma)


@dataclass(frozen=True)
class PredictorCoefficients:
    """x_next = x·x_scale - m0·m0_scale - (m1 - m0)·diff_scale  (diff_scale 0 for order 1).

    At the final step (σ_next = 0) the update is exactly the x0 prediction: `final` is set and
    the references' formula reduces to x_next = m0 bit for bit (0·x + 1·m0).
    """

    x_scale: float
    m0_scale: float
    diff_scale: float
    final: bool = False


@dataclass(frozen=True)
class CorrectorCoefficients:
    """x_corrected = x_last·x_scale - m0·m0_scale - (m1 - m0)·diff_scale - (m_t - m0)·new_scale."""

    x_scale: float
    m0_scale: float
    diff_scale: float
    new_scale: float


def predictor_coefficients(sigmas, i: int, order: int) -> PredictorCoefficients:
    """UniP-`order` from σ_i to σ_{i+1}; m0 is the x0 prediction at step i, m1 at step i-1."""
    sigma_s, sigma_t = float(sigmas[i]), float(sigmas[i + 1])
    if sigma_t == 0.0:
        # λ_t = +inf: e^-h - 1 = -1 and α_t = 1, so the step returns m0; a second-order step
        # here would divide by an infinite h, which lower_order_final exists to prevent.
        if order != 1:
            raise ValueError(f"UniPC's step into sigma 0 must be first order; got order {order}.")
        return PredictorCoefficients(0.0, -1.0, 0.0, final=True)
    alpha_t = 1.0 - sigma_t
    lam_s = _log_snr(sigma_s)
    h = _log_snr(sigma_t) - lam_s
    h_phi_1 = math.expm1(-h)  # data prediction integrates e^{-h}; bh2: B(h) = e^{-h} - 1 too
    b_h = h_phi_1
    diff_scale = 0.0
    if order == 2:
        r = (_log_snr(float(sigmas[i - 1])) - lam_s) / h
        # The references fix ρ = 1/2 for the second-order predictor instead of solving for it.
        diff_scale = alpha_t * b_h * 0.5 / r
    elif order != 1:
        raise ValueError(f"FlowUniPC supports predictor orders 1 and 2; got {order}.")
    return PredictorCoefficients(sigma_t / sigma_s, alpha_t * h_phi_1, diff_scale)


def corrector_coefficients(sigmas, i: int, order: int) -> CorrectorCoefficients:
    """UniC-`order` refining the step σ_{i-1} → σ_i with the new x0 prediction m_t at step i;
    m0 is the prediction at step i-1, m1 at step i-2, x_last the (corrected) sample at i-1."""
    sigma_s, sigma_t = float(sigmas[i - 1]), float(sigmas[i])
    alpha_t = 1.0 - sigma_t
    lam_s = _log_snr(sigma_s)
    hh = -(_log_snr(sigma_t) - lam_s)
    h_phi_1 = math.expm1(hh)
    b_h = h_phi_1
    if order == 1:
        rho_prev, rho_new, r = 0.0, 0.5, 1.0
    elif order == 2:
        r = (_log_snr(float(sigmas[i - 2])) - lam_s) / -hh
        # ρ solves [[1, 1], [r, 1]]·ρ = [φ₂·1!/B(h), φ₃·2!/B(h)] (UniC's order conditions),
        # with φ₂ = φ₁/hh - 1 and φ₃ = φ₂/hh - 1/2 in the references' recursion.
        phi_2 = h_phi_1 / hh - 1.0
        phi_3 = phi_2 / hh - 0.5
        b1, b2 = phi_2 / b_h, 2.0 * phi_3 / b_h
        rho_prev = (b1 - b2) / (1.0 - r)
        rho_new = b1 - rho_prev
    else:
        raise ValueError(f"FlowUniPC supports corrector orders 1 and 2; got {order}.")
    scale = alpha_t * b_h
    return CorrectorCoefficients(
        sigma_t / sigma_s, alpha_t * h_phi_1, scale * rho_prev / r, scale * rho_new
    )


def step_order(step_index: int, steps: int) -> int:
    """The predictor order the references use at `step_index`: warm up from 1, and drop to 1 on
    the final step (lower_order_final)."""
    return min(SOLVER_ORDER, steps - step_index, step_index + 1)


class FlowUniPC:
    """Stateful UniPC sampler over one schedule; construct one per generation (or `reset()`).

    `step(model_output, sample, step_index, ops)` must be called for step_index 0, 1, …, N-1
    in order. It keeps the last two x0 predictions and the last sample (the references keep the
    same three arrays), all in the compute dtype: float32, or float64 for float64 input. The
    kept arrays may be the caller's own (a float32 sample is not copied), so callers must not
    modify arrays in place after passing them in — the references have the same contract.
    """

    name = "unipc"

    def __init__(self, schedule: Schedule):
        sig = schedule.sigmas
        if not (0.0 < sig[0] < 1.0):
            raise ValueError(
                f"UniPC needs 0 < sigma_0 < 1 (it takes log(1 - sigma)); the {schedule.kind!r} "
                f"schedule starts at {sig[0]!r}. Use the 'official' or 'diffusers' schedule."
            )
        self.schedule = schedule
        self.reset()

    def reset(self) -> None:
        self._next_index = 0
        self._x0_history: list = []  # [m_{i-1}, m_i]
        self._last_sample = None
        self._last_order = 0

    def step(self, model_output, sample, step_index: int, ops):
        if step_index != self._next_index:
            raise ValueError(
                f"FlowUniPC.step expected step_index {self._next_index} but got {step_index}; "
                f"steps must run in order 0..{self.schedule.steps - 1} (call reset() to restart)."
            )
        sigmas, steps = self.schedule.sigmas, self.schedule.steps
        out_dtype = ops.dtype_name(sample)
        compute = "float64" if out_dtype == "float64" else "float32"
        x = ops.cast(sample, compute)
        # The references form x0 from the sample the model saw, before the corrector moves it.
        x0 = x - ops.cast(model_output, compute) * float(sigmas[step_index])

        if step_index > 0:
            c = corrector_coefficients(sigmas, step_index, self._last_order)
            m_prev = self._x0_history[-1]
            x = self._last_sample * c.x_scale - m_prev * c.m0_scale - (x0 - m_prev) * c.new_scale
            if self._last_order == 2:
                x = x - (self._x0_history[-2] - m_prev) * c.diff_scale

        self._x0_history = (self._x0_history + [x0])[-SOLVER_ORDER:]
        order = step_order(step_index, steps)
        self._last_sample, self._last_order = x, order

        p = predictor_coefficients(sigmas, step_index, order)
        if p.final:
            x_next = x0
        else:
            x_next = x * p.x_scale - x0 * p.m0_scale
            if order == 2:
                x_next = x_next - (self._x0_history[-2] - x0) * p.diff_scale
        self._next_index += 1
        return ops.cast(x_next, out_dtype)
