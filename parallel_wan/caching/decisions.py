"""What the cache does at each step, decided on the host before the loop.

MagCache's and TaylorSeer's decisions depend on settings and a curve only, so they are made
here once, identically on every rank and backend, with no device sync. First-Block Cache
decides from activations; its steps say "probe" and the decision is made in the step (reduced
over the sequence-parallel group first).

Each expert keeps its own cache over its own steps — the counters restart and nothing crosses
the expert switch (diffusers' hooks live per transformer; an expert's first step always
computes).
"""

from __future__ import annotations

from dataclasses import dataclass

from .magcache_schedule import MagCacheSettings, skip_schedule
from .settings import CacheSettings

COMPUTE, REUSE, PREDICT, PROBE = "compute", "reuse", "predict", "probe"


@dataclass(frozen=True)
class CacheStep:
    action: str  # compute | reuse (MagCache: x + cached residual) | predict (TaylorSeer) | probe (FBCache)
    fresh: bool  # the first step of its expert: no state from earlier steps is used
    # TaylorSeer: on compute, `terms` factors are kept after the update (1 … order + 1) from the
    # previous update `delta` steps ago (`prev_terms` of its factors exist); on predict, the
    # prediction sums `terms` factors at `offset` steps after the last update.
    terms: int = 0
    prev_terms: int = 0
    delta: int = 0
    offset: int = 0

    def as_row(self) -> dict:
        """The step's numbers, for programs that take them as data (the JAX step)."""
        return {
            "action": ACTIONS.index(self.action),
            "fresh": int(self.fresh),
            "terms": self.terms,
            "prev_terms": self.prev_terms,
            "delta": self.delta,
            "offset": self.offset,
        }


ACTIONS = (COMPUTE, REUSE, PREDICT, PROBE)


def expert_runs(experts: list[str]) -> list[tuple[str, int]]:
    """[(expert, steps)] in the order the experts run (each runs one contiguous range)."""
    runs: list[tuple[str, int]] = []
    for name in experts:
        if runs and runs[-1][0] == name:
            runs[-1] = (name, runs[-1][1] + 1)
        else:
            runs.append((name, 1))
    return runs


def cache_plan(
    settings: CacheSettings,
    experts: list[str],
    split: int | None = None,
    expert_order: tuple[str, str] | None = None,
    begin: int = 0,
) -> list[CacheStep]:
    """One CacheStep per step of a run whose step i runs expert `experts[i]`. `split`: for a
    two-expert MagCache curve without one, the high-noise steps of its calibration run.
    `expert_order`: a two-expert model's (high, low) names, so that a run whose steps all fall
    on one expert reads that expert's part of a two-expert curve (not the whole curve).
    `begin`: the first step that runs (video-to-video starts part-way, pipeline/steps.first_step):
    the cache decides over the steps that run, as diffusers' hooks do — they see only those
    calls — with MagCache's ratios read at the steps' places in the whole schedule; the steps
    before `begin` are placeholders (compute) that never run."""
    runs = expert_runs(experts[begin:])
    fresh = [i == begin or (i > begin and experts[i] != experts[i - 1]) for i in range(len(experts))]
    before = [CacheStep(COMPUTE, False)] * begin
    if not settings.skips:
        return [CacheStep(COMPUTE, f) for f in fresh]
    if settings.kind == "fbcache":
        return before + [CacheStep(PROBE, f) for f in fresh[begin:]]
    if settings.kind == "magcache":
        mag = MagCacheSettings(
            settings.threshold,
            settings.max_skips,
            settings.retention,
            settings.curve,
            settings.split if settings.split is not None else split,
        )
        per_expert = [steps for _, steps in expert_runs(experts)]
        if expert_order is not None and mag.calibration_split is not None:
            per_expert = [experts.count(name) for name in expert_order]  # [n, 0] / [0, n] when one runs
        skips = skip_schedule(mag, per_expert, begin)
        return [CacheStep(REUSE if s else COMPUTE, f) for s, f in zip(skips, fresh)]
    plan = list(before)
    for _, steps in runs:
        plan += taylor_expert_plan(steps, settings.interval, settings.warmup, settings.order)
    return plan


def taylor_computes(i: int, interval: int, warmup: int) -> bool:
    """diffusers' TaylorSeer rule for an expert's call i (0-based): compute during the warm-up,
    then on every `interval`-th step after it (steps warmup, warmup+1+interval, …: the first
    predicted step is `warmup`)."""
    return i < warmup or (i - warmup - 1) % interval == 0


def taylor_expert_plan(steps: int, interval: int, warmup: int, order: int) -> list[CacheStep]:
    """One expert's TaylorSeer steps: divided differences in step units, up to `order`."""
    out, last, terms = [], None, 0
    for i in range(steps):
        if taylor_computes(i, interval, warmup):
            delta = 0 if last is None else i - last
            new_terms = 1 if last is None else min(terms + 1, order + 1)
            out.append(
                CacheStep(COMPUTE, i == 0, terms=new_terms, prev_terms=0 if last is None else terms, delta=delta)
            )
            last, terms = i, new_terms
        else:
            out.append(CacheStep(PREDICT, False, terms=terms, offset=i - last))
    return out


def skipped_steps(plan: list[CacheStep]) -> list[int]:
    """Global indices of the steps whose transformer work is skipped by the host's plan."""
    return [i for i, s in enumerate(plan) if s.action in (REUSE, PREDICT)]
