"""MagCache's skip schedule, decided on the host before the loop.

MagCache (Ma et al. 2025) skips the transformer's block stack on a step when the residual
r = stack output − stack input has barely changed since the last computed step, reusing the
cached residual (x + r_cached). How much r changes is not measured at run time: it is read from
a calibrated curve of magnitude ratios γ_i = ‖r_i‖ / ‖r_{i−1}‖. So the decisions depend only on
the curve and the settings — never on activations — and every rank, backend and mesh computes
the same schedule from the same numbers with no device sync (the property that breaks the
activation-driven caches under sequence parallelism).

Per expert, over the steps that expert runs (diffusers' `MagCacheConfig` semantics when each
transformer gets its own step count and its own slice of the curve; with the official curves
this reproduces the official repository's and maxdiffusion's published schedules exactly):

- the curve's cond entries are cut at the calibration run's expert switch, and each expert's
  slice is resampled by nearest index to the number of steps the expert runs now;
- the first round(retention · steps) steps of each expert always compute (the forced zone);
- after it, each step multiplies the accumulated ratio Γ by γ_i, counts one more step since the
  last compute and adds |1 − Γ| to the accumulated error E; the step is skipped while E ≤
  threshold and at most `max_skips` steps in a row were skipped, otherwise it computes and Γ, E
  and the count reset;
- nothing carries over the expert switch (each expert has its own residual);
- a run that begins part-way (video-to-video) decides from its first step as above, over the
  steps each expert runs, with the ratios at those steps' places in the whole schedule — what
  diffusers' hook does given those steps' slice of the curve.

One decision per step serves both CFG rows (the curves' cond entries).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import magcache_curves


@dataclass(frozen=True)
class MagCacheSettings:
    threshold: float  # the largest accumulated error E a skip may have
    max_skips: int  # K: consecutive skips allowed
    retention: float  # the forced-compute fraction at the start of each expert's steps
    curve: tuple[float, ...]  # official format: interleaved cond/uncond, 2·N − 2 values
    calibration_split: int | None  # steps of the high-noise expert in the calibration run

    def __post_init__(self):
        if not (math.isfinite(self.threshold) and self.threshold >= 0):
            raise ValueError(f"cache.threshold={self.threshold!r} must be a finite number ≥ 0")
        if self.max_skips < 1:
            raise ValueError(f"cache.max_skips={self.max_skips!r} must be ≥ 1")
        if not (0 <= self.retention < 1):
            raise ValueError(f"cache.retention={self.retention!r} must be in [0, 1)")
        if len(self.curve) < 2 or len(self.curve) % 2:
            raise ValueError(
                f"a MagCache curve holds interleaved cond/uncond ratios (an even count ≥ 2); "
                f"got {len(self.curve)} values"
            )
        if not all(math.isfinite(r) and r > 0 for r in self.curve):
            raise ValueError("a MagCache curve's ratios must be finite and > 0")
        steps = self.calibration_steps
        if self.calibration_split is not None and not (0 < self.calibration_split < steps):
            raise ValueError(f"calibration split {self.calibration_split} is outside the curve's {steps} steps")

    @property
    def calibration_steps(self) -> int:
        return len(self.curve) // 2 + 1


def official(name: str, threshold: float, max_skips: int, retention: float) -> MagCacheSettings:
    """Settings over one of the shipped official curves (`magcache_curves`, e.g. "T2V_A14B")."""
    return MagCacheSettings(
        threshold, max_skips, retention, getattr(magcache_curves, name), magcache_curves.CALIBRATION_SPLIT[name]
    )


def cond_ratios(curve) -> list[float]:
    """γ of every step of the calibration run for the cond branch; step 0 has nothing before it
    (1.0, as the official code pads it)."""
    return [1.0, *curve[0::2]]


def resample_nearest(ratios, steps: int) -> list[float]:
    """`ratios` at `steps` points by nearest index (diffusers' and the official rule:
    index = round(i · (L − 1) / (steps − 1)), numpy's round half to even)."""
    length = len(ratios)
    if steps == length:
        return list(ratios)
    if steps == 1:
        return [ratios[-1]]
    scale = (length - 1) / (steps - 1)
    return [ratios[round(i * scale)] for i in range(steps)]


def expert_skips(ratios, steps: int, settings: MagCacheSettings, start: int = 0) -> list[bool]:
    """One expert's decisions over its own `steps` (see the module docstring); the first `start`
    of them do not run (False), and the decisions begin at `start`."""
    ratios = resample_nearest(ratios, steps)
    forced = start + int(settings.retention * (steps - start) + 0.5)
    skips, ratio, error, run = [False] * start, 1.0, 0.0, 0
    for i in range(start, steps):
        skip = False
        if i >= forced:
            ratio *= ratios[i]
            run += 1
            error += abs(1.0 - ratio)
            # i > start: a skip needs a residual, which only a computed step of this expert leaves.
            skip = i > start and error <= settings.threshold and run <= settings.max_skips
            if not skip:
                ratio, error, run = 1.0, 0.0, 0
        skips.append(skip)
    return skips


def skip_schedule(settings: MagCacheSettings, steps_per_expert: list[int], begin: int = 0) -> list[bool]:
    """Every step's decision, in step order, for a run whose experts run `steps_per_expert`
    steps one after the other (one entry: a single model), from step `begin` on."""
    ratios = cond_ratios(settings.curve)
    split = settings.calibration_split
    if len(steps_per_expert) == 1:
        slices = [ratios]
    elif len(steps_per_expert) == 2:
        if split is None:
            raise ValueError("a two-expert run needs a curve with a calibration split (where its experts met)")
        slices = [ratios[:split], ratios[split:]]
    else:
        raise ValueError(f"MagCache runs one or two experts, not {len(steps_per_expert)}")
    schedule = []
    for expert_ratios, steps in zip(slices, steps_per_expert):
        if steps > 0:
            start = min(max(begin - len(schedule), 0), steps)
            schedule += expert_skips(expert_ratios, steps, settings, start)
    return schedule
