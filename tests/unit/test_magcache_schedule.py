"""MagCache's host-side skip schedule against the published Wan 2.2 schedules (no model needed).

The official repository prints its T2V-A14B schedule for 40 steps at threshold 0.06, K 2,
retention 0.4 (steps 10 11 13 14 16 17 19 20 22 23 25 32 34 36: 14 of 40); maxdiffusion's
MagCache-for-Wan-2.2 change reports 17 of 40 for I2V-A14B at 0.06/2/0.2; the official TI2V-5B
setting 0.06/2/0.2 skips 25 of 50 (its ~2× time). The split of the steps between the experts is
the run's own (the schedule's timesteps against the preset's boundary).
"""

from __future__ import annotations

import pytest

from parallel_wan.caching import magcache_curves
from parallel_wan.caching.magcache_schedule import (
    MagCacheSettings,
    cond_ratios,
    expert_skips,
    official,
    resample_nearest,
    skip_schedule,
)
from parallel_wan.sampling import count_high_noise_steps, make_schedule


def steps_per_expert(steps: int, shift: float, boundary: float | None, kind: str = "official") -> list[int]:
    if boundary is None:
        return [steps]
    high = count_high_noise_steps(make_schedule(kind, steps, shift), boundary)
    return [high, steps - high]


def skipped(schedule) -> list[int]:
    return [i for i, skip in enumerate(schedule) if skip]


@pytest.mark.parametrize("kind", ["official", "diffusers"])
def test_t2v_a14b_reproduces_the_official_schedule(kind):
    split = steps_per_expert(40, 12.0, 0.875, kind)
    assert split == [26, 14]  # the calibration run's own split, so no resampling happens
    schedule = skip_schedule(official("T2V_A14B", 0.06, 2, 0.4), split)
    assert skipped(schedule) == [10, 11, 13, 14, 16, 17, 19, 20, 22, 23, 25, 32, 34, 36]


@pytest.mark.parametrize(
    ("curve", "steps", "shift", "boundary", "setting", "count"),
    [
        ("T2V_A14B", 40, 12.0, 0.875, (0.04, 2, 0.2), 17),
        ("I2V_A14B", 40, 5.0, 0.900, (0.06, 2, 0.2), 17),
        ("TI2V_5B_T2V", 50, 5.0, None, (0.06, 2, 0.2), 25),
    ],
)
def test_published_skip_counts(curve, steps, shift, boundary, setting, count):
    schedule = skip_schedule(official(curve, *setting), steps_per_expert(steps, shift, boundary))
    assert len(schedule) == steps and sum(schedule) == count


def test_each_expert_restarts_with_a_forced_compute_zone():
    # T2V at 0.06/2/0.2: 26 high-noise steps force int(5.2 + .5) = 5, 14 low-noise force 3.
    schedule = skip_schedule(official("T2V_A14B", 0.06, 2, 0.2), [26, 14])
    assert not any(schedule[:5]) and schedule[5]
    assert not any(schedule[26:29])  # the low-noise expert starts over: no residual crosses the switch
    # Never more than K = 2 skips in a row.
    runs = "".join("s" if s else "c" for s in schedule)
    assert "sss" not in runs


def test_resampling_follows_the_nearest_index_rule():
    ratios = [1.0, 0.9, 0.8, 0.7, 0.6]
    assert resample_nearest(ratios, 5) == ratios
    assert resample_nearest(ratios, 3) == [1.0, 0.8, 0.6]
    assert resample_nearest(ratios, 1) == [0.6]
    # 9 points over 5: index round(i/2) with half to even → 0 0 1 2 2 2 3 4 4
    assert resample_nearest(ratios, 9) == [1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6]


def test_fewer_steps_resample_each_experts_slice():
    # 20 steps of T2V: the high-noise expert's 26 calibrated ratios are resampled to its own count.
    split = steps_per_expert(20, 12.0, 0.875)
    schedule = skip_schedule(official("T2V_A14B", 0.06, 2, 0.2), split)
    assert len(schedule) == 20
    high_ratios = cond_ratios(magcache_curves.T2V_A14B)[:26]
    settings = official("T2V_A14B", 0.06, 2, 0.2)
    assert schedule[: split[0]] == expert_skips(high_ratios, split[0], settings)


def test_a_threshold_of_zero_never_skips_and_a_huge_one_skips_k_in_a_row():
    assert not any(skip_schedule(official("T2V_A14B", 0.0, 2, 0.2), [26, 14]))
    greedy = skip_schedule(official("T2V_A14B", 1e9, 2, 0.0), [26, 14])
    # Pattern per expert: compute (step 0 has no residual), then skip, skip, compute, ...
    assert "".join("s" if s else "c" for s in greedy[:7]) == "csscssc"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(threshold=-0.1), "cache.threshold"),
        (dict(threshold=float("nan")), "cache.threshold"),
        (dict(max_skips=0), "cache.max_skips"),
        (dict(retention=1.0), "cache.retention"),
        (dict(retention=-0.1), "cache.retention"),
        (dict(curve=(1.0, 1.0, 0.9)), "even count"),
        (dict(curve=(1.0, float("inf"))), "finite"),
        (dict(calibration_split=40), "outside"),
    ],
)
def test_bad_settings_are_refused(kwargs, message):
    base = dict(threshold=0.06, max_skips=2, retention=0.2, curve=magcache_curves.T2V_A14B, calibration_split=26)
    with pytest.raises(ValueError, match=message):
        MagCacheSettings(**{**base, **kwargs})


def test_a_run_that_begins_part_way_decides_from_its_first_step():
    """Video-to-video runs steps begin … N−1: each expert's decisions start at its first step run
    (forced zone and counters over the steps it runs, no residual before it), with the ratios at
    those steps' places in the whole schedule — the whole run's decisions from a later start."""
    settings = official("T2V_A14B", 1e9, 2, 0.0)
    whole = skip_schedule(settings, [26, 14])
    part = skip_schedule(settings, [26, 14], begin=10)
    assert len(part) == 40 and not any(part[:10])
    assert "".join("s" if s else "c" for s in part[10:17]) == "csscssc"  # step 10 computes: nothing cached
    assert part[26:] == whole[26:]  # the low-noise expert is untouched by a start inside the high one's
    late = skip_schedule(settings, [26, 14], begin=30)
    assert not any(late[:31]) and late[30:] == expert_skips(cond_ratios(settings.curve)[26:], 14, settings, 4)[4:]
    # the ratios read are the schedule's from the start on: with retention, the forced zone is the
    # first round(0.25 · steps run) of the run's steps
    ratios = [1.0, 1.0, 1.5, 1.0, 1.0, 1.0, 1.0, 1.0]
    mine = MagCacheSettings(0.1, 3, 0.25, tuple(r for x in ratios[1:] for r in (x, x)), None)
    assert skipped(skip_schedule(mine, [8], begin=2)) == [4, 5, 6]  # 2, 3 forced: 0.25 · 6 = 1.5 → 2


def test_the_cache_plan_of_a_run_that_begins_part_way():
    from parallel_wan.caching.decisions import COMPUTE, PREDICT, PROBE, cache_plan
    from parallel_wan.caching.settings import CacheSettings

    experts = ["high"] * 3 + ["low"] * 5
    taylor = cache_plan(CacheSettings("taylorseer", interval=2, warmup=1, order=1), experts, begin=1)
    # diffusers' rule over each expert's calls from the first run: compute, predict, (compute)…
    assert [s.action for s in taylor] == [COMPUTE, COMPUTE, PREDICT, COMPUTE, PREDICT, COMPUTE, PREDICT, COMPUTE]
    assert [s.fresh for s in taylor] == [False, True, False, True, False, False, False, False]
    fb = cache_plan(CacheSettings("fbcache", threshold=0.5), experts, begin=4)
    assert [s.action for s in fb] == [COMPUTE] * 4 + [PROBE] * 4 and [s.fresh for s in fb].index(True) == 4
    # the steps before the start never run: the plan keeps one entry per step of the schedule
    assert len(cache_plan(CacheSettings("none"), experts, begin=4)) == 8
