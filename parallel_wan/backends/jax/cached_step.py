"""The JAX denoising step with a step cache: `(…the plain step's inputs…, row, state) →
(prediction, new state, decisions)`, one compiled program for every step of an expert.

MagCache and First-Block Cache live at the block seam, inside the mapped forward
(cached_blocks.py). TaylorSeer predicts the transformer's whole output, so it wraps the mapped
forward from outside: a `lax.cond` on the step's action either runs the forward and refreshes
the float32 factors, or sums them — elementwise on the global (rows, tokens, C) arrays, which
XLA keeps sharded like the output. The arithmetic is caching/taylor.py's with the host's
per-step numbers as data: how many factors the update fills (`terms`), the step distance
(`delta`) and the prediction's coefficients offsetᵏ / k! (`coef`, computed on the host in
float64 as the torch loop computes them, then rounded to float32).

`decisions`: {"skipped": (branches,) int8, 1 where the branch skipped the block stack} and, for
a MagCache calibration, {"calibration": (branches,) float32 ratio means}; the host keeps them
on the device until the loop ends.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ...caching.decisions import ACTIONS, PREDICT
from ...pipeline import model_inputs
from . import ops
from .cached_blocks import ROW_KEYS, CacheSpec

STEP_NAME = "noise_prediction_step"  # the compiled program's name, as compile logs show it


def cached_step(spec: CacheSpec, forward, layout: model_inputs.StepRows):
    """`forward(params, x, ts, context, cos, sin[, seam inputs])`: the mapped forward (with the
    block cache as its seam unless TaylorSeer); `layout`: the plain step's forward rows, whose
    inputs and CFG combine are pipeline/model_inputs.py's."""

    def noise_prediction_step(params, x, t, guidance, context, cos, sin, cond, t_mask, row, state):
        tokens, ts, context = model_inputs.forward_inputs(layout, x, t, context, cond, t_mask, ops)
        if spec.kind == "taylorseer":
            out, state, decisions = _taylor(spec, lambda: forward(params, tokens, ts, context, cos, sin), row, state)
        else:
            seam_row = {k: row[k] for k in ROW_KEYS}
            out, (state, decisions) = forward(params, tokens, ts, context, cos, sin, (seam_row, state))
        return model_inputs.guided_prediction(layout, out.astype(jnp.float32), guidance), state, decisions

    noise_prediction_step.__name__ = STEP_NAME
    return noise_prediction_step


def _taylor(spec: CacheSpec, run_forward, row, state):
    names = spec.state_names()
    factors = [state[n] for n in names]

    def compute(_):
        out = run_forward().astype(jnp.float32)
        new = [out]
        for j in range(len(factors) - 1):  # factor j + 1 exists when the update fills > j + 1 terms
            difference = (new[j] - factors[j]) / row["delta"].astype(jnp.float32)
            new.append(jnp.where(j < row["terms"] - 1, difference, 0.0))
        return out, new

    def predict(_):
        out = jnp.zeros_like(factors[0])
        for k, f in enumerate(factors):  # coef[k] = 0 past the factors this prediction sums
            out = out + f * row["coef"][k]
        return out, factors

    predicting = row["action"] == ACTIONS.index(PREDICT)
    out, new = lax.cond(predicting, predict, compute, None)
    return out, dict(zip(names, new)), {"skipped": jnp.full((spec.branches,), predicting, jnp.int8)}
