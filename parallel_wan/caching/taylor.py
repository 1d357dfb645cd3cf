"""TaylorSeer's arithmetic on the transformer's output (lite mode: the output head is what is
predicted; the blocks do not run on a predicted step), written once against `ops`.

A computed step refreshes the factors — f0 the output, f(j+1) = (f(j) − f(j)_previous) / Δ,
the divided differences in step units — and a predicted step sums f(k) · offᵏ / k!, exactly as
diffusers' TaylorSeerState does. The factors are float32 (the prediction is what the sampler
consumes; diffusers defaults to bf16 factors, which an fp32 run should not get silently).
The state is a fixed set of arrays f0 … f(order) so a compiled program carries it as data; the
host's plan (decisions.py) says how many of them hold something (`terms`).
"""

from __future__ import annotations

import math


def factor_names(order: int) -> list[str]:
    return [f"taylor_f{k}" for k in range(order + 1)]


def update(factors: list, output, step, ops) -> list:
    """The factors after a computed step whose float32 `output` is f0 (step: its CacheStep)."""
    new = [output]
    for j in range(step.terms - 1):  # j < prev_terms: the previous update had factor j
        new.append((new[j] - factors[j]) / float(step.delta))
    return new + [ops.zeros_like(output) for _ in range(len(factors) - len(new))]


def predict(factors: list, step, ops):
    """Σ_k<terms f(k) · offsetᵏ / k!, in float32."""
    out = ops.zeros_like(factors[0])
    for k in range(step.terms):
        out = out + factors[k] * ((step.offset**k) / math.factorial(k))
    return out
