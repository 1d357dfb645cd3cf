"""scan_loop=true: a range of denoising steps in ONE compiled program — a `lax.scan` over the
steps with `lax.cond` on the expert — so a whole generation is one dispatch.

The host still decides everything per step (timestep, expert, guidance) and hands the
decisions over as arrays; the sampler's per-step coefficients (sampling/, computed on the host
in float64) come as its table rounded to float32, and the sampler's state is the scan's carry.
The step applies the sampler's own `update` — the function the Python loop calls — with traced
coefficients, so its flags select terms with `where` instead of Python branches. A range
[k0, k1) starts from the sampler state after step k0 − 1, so [0, k) then [k, N) is [0, N).

A step cache rides along: its plan rows are one more per-step input, its arrays part of the
carry, and each step's decisions a per-step output the host reads after the loop.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import ops
from .programs import cached_program


def make_loop(steps: list, update, cached: bool = False):
    """The scanned loop over `steps` (one pure step function per expert, in expert-index
    order) with the sampler's `update`; closes over no arrays. `finish` (static): the range
    ends the schedule, so the held tokens are re-imposed once more after it. `cached`: the
    steps are step-cache steps (cached_step.py): `cache` is their arrays, `plan["cache"]`
    their rows, and the loop also returns the arrays and the per-step decisions."""

    def denoise_scan(params, x, state, plan, held, contexts, aux, cache, finish: bool):
        def hold(x):
            return x if held is None else jnp.where(held[1] > 0, x, held[0])

        def branch(k):
            # each expert its own context rows: an unguided expert's are the prompts alone
            return lambda params, x, t, g, *row_cache: steps[k](params[k], x, t, g, contexts[k], *aux, *row_cache)

        def body(carry, s):
            x, state, cache = carry
            x = hold(x)
            args = (params, x, s["t"], s["guidance"]) + ((s["cache"], cache) if cached else ())
            if len(steps) == 1:
                out = branch(0)(*args)
            else:  # two experts: the host's choice of expert, per step
                out = lax.cond(s["expert"] == 0, branch(0), branch(1), *args)
            pred, cache, decisions = out if cached else (out, None, None)
            return update(s["coef"], state, pred, x, ops) + (cache,), decisions

        # A state entry no step has filled yet is never selected; the carry needs an array.
        state = {k: jnp.zeros_like(x) if v is None else v for k, v in state.items()}
        (x, state, cache), decisions = lax.scan(body, (x, state, cache), plan)
        x = hold(x) if finish else x
        return (x, state, cache, decisions) if cached else (x, state)

    return denoise_scan


class ScannedLoop:
    """The loop of a JaxNoisePredictor over a range of its steps as one jitted program."""

    def __init__(self, predictor, plan, sampler, held=None):
        self.predictor, self.held, self.update = predictor, held, sampler.update
        self.experts = sorted({step.expert for step in plan})
        self.steps = len(plan)
        self.plan = {
            "t": np.asarray([step.t for step in plan], np.float32),
            "expert": np.asarray([self.experts.index(step.expert) for step in plan], np.int32),
            "guidance": np.asarray([step.guidance for step in plan], np.float32),
        }
        self.table = sampler.float32_table()
        self.cache = getattr(predictor, "cache", None)  # a step cache (step_cache.py), or None
        key = ("scan", sampler.name) + tuple(predictor.program_key(name) for name in self.experts)
        self.program = cached_program(
            key,
            lambda: jax.jit(
                make_loop(
                    [predictor.step_function(name) for name in self.experts],
                    sampler.update,
                    cached=self.cache is not None,
                ),
                static_argnames="finish",
                out_shardings=self._out_shardings(),
            ),
        )
        self.compiled = None  # the whole schedule from a fresh state, compiled ahead

    def _out_shardings(self):
        """(x, sampler state) like x; with a cache, its arrays as the step keeps them and the
        decisions replicated (the step's own out_shardings say both)."""
        if self.cache is None:
            return self.predictor.x_sharding
        x_sharding, arrays, replicated = self.predictor.out_shardings()
        return x_sharding, x_sharding, arrays, replicated

    def _args(self, x, state, start: int, stop: int):
        p = self.predictor
        params = tuple(p.task.experts[name][1] for name in self.experts)
        plan = {k: v[start:stop] for k, v in self.plan.items()} | {
            "coef": {k: v[start:stop] for k, v in self.table.items()}
        }
        cache = None
        if self.cache is not None:
            plan["cache"], cache = self.cache.rows(start, stop), self.cache.arrays
        state = {k: None if v is None else p.shard(v) for k, v in state.items()}
        contexts = tuple(p.context_for(name) for name in self.experts)
        return params, p.shard(x), state, plan, self.held, contexts, (p.cos, p.sin, p.cond, p.t_mask), cache

    def compile(self, x, state) -> None:
        self.compiled = self.program.lower(*self._args(x, state, 0, self.steps), finish=True).compile()

    def __call__(self, x, state, start: int, stop: int):
        """(latents, sampler state) after steps [start, stop)."""
        args = self._args(x, state, start, stop)
        if self.compiled is not None and (start, stop) == (0, self.steps) and all(v is None for v in state.values()):
            out = self.compiled(*args)
        else:
            out = self.program(*args, finish=stop == self.steps)
        if self.cache is None:
            return out
        x, state, arrays, decisions = out
        self.cache.after_steps(start, arrays, decisions)  # read on the host only when asked
        return x, state
