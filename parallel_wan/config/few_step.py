"""Few-step settings: explicit schedules (`sigmas=[…]` / `timesteps=[…]`) and named recipes
(`recipe=lightning`), checked before anything loads.

A recipe is a set of model-preset values (sampler, steps, shift, schedule, guidance); it
overrides the preset it is applied to, and the command line overrides both. An explicit
schedule is used as given (sampling/explicit.py: never shifted, a final sigma 0 appended), and
its length is the step count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError

# The Lightning 4-step distillation (lightx2v/Wan2.2-Lightning, wan/configs/wan_t2v_A14B.py and
# wan/utils/fm_solvers_euler.py): Euler flow matching, 4 steps, shift 5, no CFG on either expert
# (sample_guide_scale = (1.0, 1.0)). Its scheduler shifts linspace(1000, 0, 5)/1000 by 5 and drops
# the final 0: sigmas 5s/(1 + 4s) for s = 1, 0.75, 0.5, 0.25 — timesteps 1000, 937.5, 833.33,
# 625. Given as sigmas (σ = 5/6 exactly, rounded to float32 once, as the reference's float32
# arithmetic rounds it), so the timesteps are the reference's to the last bit; the boundaries
# (0.875 T2V, 0.9 I2V) give 2 high-noise + 2 low-noise steps. `shift` is recorded, not applied.
LIGHTNING_SIGMAS = tuple(5 * s / (1 + 4 * s) for s in (1.0, 0.75, 0.5, 0.25))
RECIPES: dict[str, dict[str, Any]] = {
    "lightning": {
        "sampler": "euler",
        "steps": len(LIGHTNING_SIGMAS),
        "shift": 5.0,
        "sigmas": LIGHTNING_SIGMAS,
        "timesteps": None,
        "guidance_high": 1.0,
        "guidance_low": 1.0,
    },
}


def apply_recipe(preset: Mapping, recipe) -> dict:
    """A model preset's keys with `recipe`'s values laid over them (recipe None: unchanged)."""
    preset = dict(preset)
    if recipe is None:
        return preset
    if recipe not in RECIPES:
        raise ConfigError(f"recipe={recipe!r} is not known; choose one of: {', '.join(RECIPES)} (or drop recipe=)")
    return {**preset, **RECIPES[recipe], "recipe": recipe}


def schedule_values(key: str, value) -> tuple[float, ...] | None:
    """`sigmas` / `timesteps`: None, or a non-empty, strictly decreasing list of numbers in
    (0, 1] / (0, 1000] (the final 0 is appended, not given)."""
    if value is None:
        return None
    is_sigmas = key.endswith("sigmas")  # "sigmas" or a preset's "model.sigmas"
    top = 1.0 if is_sigmas else 1000.0
    example = f"{key}=[1.0,0.9375,0.8333,0.625]" if is_sigmas else f"{key}=[1000,937.5,833.3,625]"
    if (
        isinstance(value, (str, bytes))
        or not hasattr(value, "__len__")
        or not len(value)
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
    ):
        raise ConfigError(
            f"{key}={value!r} must be a non-empty list of numbers, one per step, e.g. {example}", setting=key
        )
    values = tuple(float(v) for v in value)
    if any(not 0 < v <= top for v in values):
        raise ConfigError(
            f"{key}={list(values)} must lie in (0, {top:g}] ({'σ' if is_sigmas else 't'} = 0 "
            f"is where sampling ends, appended after the last step); e.g. {example}",
            setting=key,
        )
    if any(b >= a for a, b in zip(values, values[1:])):
        raise ConfigError(
            f"{key}={list(values)} must decrease strictly (one step each, from most to least noise); e.g. {example}",
            setting=key,
        )
    return values


def explicit_schedule_settings(cfg: Mapping, preset_sigmas, preset_timesteps, preset_steps: int):
    """(sigmas, timesteps, steps) of the run: the command line's explicit schedule, else the
    preset's (or its recipe's); an explicit schedule's length sets `steps`, and a `steps=` that
    disagrees is refused."""
    sigmas, timesteps = schedule_values("sigmas", cfg.get("sigmas")), schedule_values("timesteps", cfg.get("timesteps"))
    if sigmas is not None and timesteps is not None:
        raise ConfigError(
            "sigmas=[…] and timesteps=[…] were both given; give one of them (a timestep t is the sigma t/1000)",
            setting=("sigmas", "timesteps"),
        )
    source = "given"
    if sigmas is None and timesteps is None:
        sigmas, timesteps, source = preset_sigmas, preset_timesteps, "of the model preset / recipe"
    given = sigmas if sigmas is not None else timesteps
    steps = cfg.get("steps")
    if given is None:
        return None, None, preset_steps if steps is None else steps
    if steps is not None and steps != len(given):
        key = "sigmas" if sigmas is not None else "timesteps"
        raise ConfigError(
            f"steps={steps} conflicts with the {len(given)} {key} {source} (one step each); drop steps= "
            f"or give {key}=[…] with {steps} values",
            setting=("steps", key),
        )
    return sigmas, timesteps, len(given)
