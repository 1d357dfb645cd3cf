"""UniPC for flow matching (Wan 2.2's default `unipc` sampler), split into host and device parts.

The solver is the one both references run: UniPC (Zhao et al. 2023, arXiv:2302.04867) with
solver order 2, B(h) = e^h - 1 ("bh2"), data prediction (the model's velocity v is turned into
x0 = x - σ·v), the UniC corrector on every step after the first, order 1 on the first step
(warm-up) and on the last step ("lower_order_final"), final sigma 0. With α = 1 - σ and
λ = log(α/σ), one step from σ_s to σ_t is, for order p:

    x_t = (σ_t/σ_s)·x - α_t·(e^-h - 1)·m0 - α_t·B(h)·Σ_k ρ_k·D_k,    h = λ_t - λ_s,

D_k being divided differences of earlier x0 predictions. Only the scalar coefficients depend
on the step, so they are computed here on the host in float64 from the schedule, one table row
per step (`unipc_table`); the arrays only see `+`, `-`, `*` by those scalars and a choice of
terms (`unipc_update`, written once against `ops`). That is what lets the orchestrator run the
update on each rank's sequence shard, and JAX run it eagerly or inside `lax.scan`, with results
identical to the whole-array update. The state between steps is explicit (`UNIPC_STATE`), so a
loop can stop after any step and resume from the saved state.

The references compute the same coefficients in float32 torch scalars; in fp32 our trajectory
therefore differs from theirs at the ~1e-7 relative level per step (their rounding, mostly in
h = λ_t - λ_s), while in float64 the two agree to rounding (tests/unit/test_sampling.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

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
    return CorrectorCoefficients(sigma_t / sigma_s, alpha_t * h_phi_1, scale * rho_prev / r, scale * rho_new)


def step_order(step_index: int, steps: int) -> int:
    """The predictor order the references use at `step_index`: warm up from 1, and drop to 1 on
    the final step (lower_order_final)."""
    return min(SOLVER_ORDER, steps - step_index, step_index + 1)


def unipc_table(schedule: Schedule, begin: int = 0) -> dict[str, np.ndarray]:
    """Every step's coefficients, float64 host arrays indexed by step; `begin`: the first step run
    (it warms up there: first order, no corrector; the rows before it are never run).

    A step i forms x0 = x - σ_i·v, corrects the previous step with it when `corrects` (UniC of
    order 2 when `c_order2`), then predicts σ_{i+1} (order 2 when `p_order2`; `p_final`: the
    step into σ = 0 returns x0). Unused coefficients are 0.
    """
    sig = schedule.sigmas
    if not (0.0 < sig[0] < 1.0):
        raise ValueError(
            f"UniPC needs 0 < sigma_0 < 1 (it takes log(1 - sigma)); the {schedule.kind!r} "
            f"schedule starts at {sig[0]!r}. Use the 'official' or 'diffusers' schedule."
        )
    steps = schedule.steps
    rows = []
    last_order = 0  # the order of the previous step's predictor decides this step's corrector
    for i in range(steps):
        first = begin if i >= begin else 0
        if i == first:
            last_order = 0
        row = {
            "sigma": float(sig[i]),
            "corrects": float(i > first),
            "c_order2": float(last_order == 2),
            "c_x": 0.0,
            "c_m0": 0.0,
            "c_new": 0.0,
            "c_diff": 0.0,
        }
        if i > first:
            c = corrector_coefficients(sig, i, last_order)
            row.update(c_x=c.x_scale, c_m0=c.m0_scale, c_new=c.new_scale, c_diff=c.diff_scale)
        order = step_order(i - first, steps - first)
        p = predictor_coefficients(sig, i, order)
        row.update(
            p_x=p.x_scale, p_m0=p.m0_scale, p_diff=p.diff_scale, p_order2=float(order == 2), p_final=float(p.final)
        )
        rows.append(row)
        last_order = order
    return {k: np.asarray([r[k] for r in rows], np.float64) for k in rows[0]}


# The sampler's state between steps: the (corrected) sample and the x0 predictions of the last
# two steps — the three arrays the references keep. None until a step has filled them.
UNIPC_STATE = ("last", "x0_prev", "x0_prev2")


def unipc_update(c, state, prediction, latents, ops):
    """One UniPC step: (latents at σ_i, the model's velocity there) → (latents at σ_{i+1}, state).

    `c` is one step of `unipc_table`: python floats on the eager loops (flags then pick a
    branch on the host, so a step computes only its own terms), or traced float32 scalars in
    JAX's `lax.scan` (flags then select with `where`, which picks exact values, so the scan
    equals the eager loop). Computes in float32 (float64 for float64 latents), returns the
    latents' dtype. The state may hold the caller's own arrays (a float32 sample is not copied),
    so callers must not modify arrays in place after passing them in — the references have the
    same contract.
    """
    out_dtype = ops.dtype_name(latents)
    compute = "float64" if out_dtype == "float64" else "float32"
    last, m1, m2 = (state[k] for k in UNIPC_STATE)
    x = ops.cast(latents, compute)
    # The references form x0 from the sample the model saw, before the corrector moves it.
    x0 = x - ops.cast(prediction, compute) * c["sigma"]

    def corrected():
        y = last * c["c_x"] - m1 * c["c_m0"] - (x0 - m1) * c["c_new"]
        return _choose(ops, c["c_order2"], lambda: y - (m2 - m1) * c["c_diff"], lambda: y)

    x = _choose(ops, c["corrects"], corrected, lambda: x)
    m2, m1 = m1, x0

    def predicted():
        y = x * c["p_x"] - x0 * c["p_m0"]
        return _choose(ops, c["p_order2"], lambda: y - (m2 - x0) * c["p_diff"], lambda: y)

    x_next = _choose(ops, c["p_final"], lambda: x0, predicted)
    return ops.cast(x_next, out_dtype), dict(zip(UNIPC_STATE, (x, m1, m2)))


def _choose(ops, flag, if_set, if_clear):
    """`if_set()` where the flag is set: decided on the host for a host number (only that branch
    runs), per element with `where` for a traced one (both run; `where` copies exact values)."""
    if isinstance(flag, (bool, int, float, np.number)):
        return if_set() if flag else if_clear()
    return ops.where(flag > 0, if_set(), if_clear())
