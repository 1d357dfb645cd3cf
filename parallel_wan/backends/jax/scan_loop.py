"""scan_loop=true: every denoising step in ONE compiled program — a `lax.scan` over the steps
with `lax.cond` on the expert — so a whole generation is one dispatch.

The host still decides everything per step (timestep, expert, guidance) and hands the
decisions over as arrays; the samplers' per-step scalar coefficients (sampling/unipc.py,
computed on the host in float64) become a table too, and the sampler's history (last sample,
last two x0 predictions) is the scan's carry. Each step computes exactly what the Python
loop's eager update computes — the same products and differences with the same float32
coefficients — selecting with `where` the terms a step does not have.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...sampling.unipc import corrector_coefficients, predictor_coefficients, step_order


def unipc_table(schedule) -> dict[str, np.ndarray]:
    """Per-step coefficients of FlowUniPC.step, float32 (as the eager update rounds them)."""
    steps, sigmas = schedule.steps, schedule.sigmas
    rows = []
    last_order = 0
    for i in range(steps):
        row = {"sigma": float(sigmas[i]), "corrects": float(i > 0), "c_x": 0.0, "c_m0": 0.0, "c_new": 0.0,
               "c_diff": 0.0, "c_order2": float(last_order == 2)}
        if i > 0:
            c = corrector_coefficients(sigmas, i, last_order)
            row.update(c_x=c.x_scale, c_m0=c.m0_scale, c_new=c.new_scale, c_diff=c.diff_scale)
        order = step_order(i, steps)
        p = predictor_coefficients(sigmas, i, order)
        row.update(p_x=p.x_scale, p_m0=p.m0_scale, p_diff=p.diff_scale, p_order2=float(order == 2),
                   p_final=float(p.final))
        rows.append(row)
        last_order = order
    return {k: np.asarray([r[k] for r in rows], np.float32) for k in rows[0]}


def euler_table(schedule) -> dict[str, np.ndarray]:
    sigmas = schedule.sigmas
    return {"dt": np.asarray([float(sigmas[i + 1] - sigmas[i]) for i in range(schedule.steps)], np.float32)}


def unipc_update(c, state, pred, x):
    """One FlowUniPC.step on traced arrays; state = (last sample, x0 at i-1, x0 at i-2)."""
    last, m1, m2 = state
    x0 = x - pred * c["sigma"]
    corrected = last * c["c_x"] - m1 * c["c_m0"] - (x0 - m1) * c["c_new"]
    corrected = jnp.where(c["c_order2"] > 0, corrected - (m2 - m1) * c["c_diff"], corrected)
    x = jnp.where(c["corrects"] > 0, corrected, x)
    m2, m1 = m1, x0
    x_next = x * c["p_x"] - x0 * c["p_m0"]
    x_next = jnp.where(c["p_order2"] > 0, x_next - (m2 - x0) * c["p_diff"], x_next)
    x_next = jnp.where(c["p_final"] > 0, x0, x_next)
    return x_next, (x, m1, m2)


def euler_update(c, state, pred, x):
    return x + pred * c["dt"], state


SAMPLERS = {"unipc": (unipc_table, unipc_update), "euler": (euler_table, euler_update)}


def make_loop(steps: list, update):
    """The scanned loop over `steps` (one pure step function per expert, in expert-index
    order) with the sampler's `update`; closes over no arrays."""

    def denoise_scan(params, x, plan, held, aux):
        def hold(x):
            return x if held is None else jnp.where(held[1] > 0, x, held[0])

        def branch(k):
            return lambda params, x, t, g: steps[k](params[k], x, t, g, *aux)

        def body(carry, s):
            x, state = carry
            x = hold(x)
            if len(steps) == 1:
                pred = branch(0)(params, x, s["t"], s["guidance"])
            else:  # two experts: the host's choice of expert, per step
                pred = lax.cond(s["expert"] == 0, branch(0), branch(1), params, x, s["t"], s["guidance"])
            x, state = update(s["coef"], state, pred, x)
            return (x, state), None

        zero = jnp.zeros_like(x)
        (x, _), _ = lax.scan(body, (x, (zero, zero, zero)), plan)
        return hold(x)

    return denoise_scan


class ScannedLoop:
    """The whole loop of a JaxNoisePredictor as one jitted program."""

    def __init__(self, predictor, plan, sampler: str, schedule, held=None):
        from .predictor import cached_program

        if sampler not in SAMPLERS:
            raise ValueError(f"scan_loop has no table for sampler {sampler!r}; use one of {sorted(SAMPLERS)}")
        make_table, update = SAMPLERS[sampler]
        self.predictor, self.held = predictor, held
        self.experts = sorted({step.expert for step in plan})
        self.plan = {
            "t": np.asarray([step.t for step in plan], np.float32),
            "expert": np.asarray([self.experts.index(step.expert) for step in plan], np.int32),
            "guidance": np.asarray([step.guidance for step in plan], np.float32),
            "coef": make_table(schedule),
        }
        key = ("scan", sampler) + tuple(predictor.program_key(name) for name in self.experts)
        self.program = cached_program(key, lambda: jax.jit(
            make_loop([predictor.step_function(name) for name in self.experts], update),
            out_shardings=predictor.x_sharding))
        self.compiled = None

    def _args(self, x):
        p = self.predictor
        params = tuple(p.task.experts[name][1] for name in self.experts)
        return params, x, self.plan, self.held, (p.context, p.cos, p.sin, p.cond, p.t_mask)

    def compile(self, x) -> None:
        self.compiled = self.program.lower(*self._args(x)).compile()

    def __call__(self, x):
        program = self.compiled or self.program
        return program(*self._args(x))
