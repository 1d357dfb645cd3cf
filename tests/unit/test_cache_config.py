"""cache= settings: bad input stops the run in one line before anything loads; the model presets'
recommended MagCache settings give the published schedules through the real step plan; the
TaylorSeer and First-Block plans follow diffusers' counting per expert."""

import json
import os
import subprocess
import sys

import pytest
from harness.paths import REPO
from harness.settings import assert_refused, spec_for

from parallel_wan.caching.decisions import COMPUTE, PREDICT, PROBE, REUSE, cache_plan, skipped_steps, taylor_expert_plan
from parallel_wan.caching.settings import CacheSettings
from parallel_wan.config import ConfigError
from parallel_wan.pipeline.steps import make_schedule, step_cache_plan, step_plan


def ratios_file(tmp_path, content, name="ratios.json"):
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["cache=magcache", "cache.threshold=-0.1"], ["cache.threshold=-0.1", "negative"]),
        (["cache=magcache", "cache.threshold=nan"], ["cache.threshold=nan", "not finite"]),
        (["cache=magcache", "cache.threshold=inf"], ["cache.threshold=inf", "not finite"]),
        (["cache=magcache", "cache.max_skips=0"], ["cache.max_skips=0", "≥ 1"]),
        (["cache=magcache", "cache.retention=1.0"], ["cache.retention=1.0", "[0, 1)"]),
        (["cache=magcache", "cache.retention=-0.2"], ["cache.retention=-0.2", "[0, 1)"]),
        (["cache=magcache", "cache.threshold=abc"], ["cache.threshold='abc'", "not a number"]),
        (["cache=magcache", "cache.max_skips=1.5"], ["cache.max_skips=1.5", "whole number"]),
        (["cache=magcache", "cache.calibrate=yes"], ["cache.calibrate='yes'", "boolean"]),
        (["cache=magcache", "cache.ratios=/no/such.json"], ["cache.ratios=/no/such.json", "does not exist"]),
        (["cache=fbcache", "cache.threshold=-1"], ["cache.threshold=-1.0", "negative"]),
        (["cache=fbcache", "+cache.max_skips=2"], ["cache.max_skips", "cache.threshold"]),
        (["cache=taylorseer", "cache.order=0"], ["cache.order=0", "≥ 1"]),
        (["cache=taylorseer", "cache.interval=0"], ["cache.interval=0", "≥ 1"]),
        (["cache=taylorseer", "cache.warmup=0"], ["cache.warmup=0", "≥ 1"]),
    ],
)
def test_bad_cache_settings_name_the_setting_and_the_fix(overrides, words):
    assert_refused(overrides, words)


@pytest.mark.parametrize(
    "content, words",
    [
        ("[1.0, 0.99", ["not readable JSON"]),
        ([1.0, 0.99, 0.98], ["holds 3 ratios", "2·N − 2"]),
        ([], ["holds 0 ratios"]),
        ([[1.0, 0.99], [0.98, 0.97]], ["flat list of numbers"]),
        ({"ratios": [1.0, 1.0]}, ["mag_ratios"]),
        ([1.0, "x"], ["flat list of numbers"]),
        ([1.0, -0.5], ["finite number > 0"]),
        ({"mag_ratios": [1.0, 1.0, 1.0, 1.0], "split": 7}, ["split=7", "outside"]),
        ("\xff\xfe", ["not readable JSON"]),
    ],
)
def test_bad_ratios_files_are_refused(tmp_path, content, words):
    path = ratios_file(tmp_path, content)
    with pytest.raises(ConfigError) as err:
        spec_for("cache=magcache", f"cache.ratios={path}")
    for w in words:
        assert w in str(err.value), str(err.value)


def test_calibrate_together_with_a_curve_is_refused(tmp_path):
    path = ratios_file(tmp_path, [1.0, 1.0])
    with pytest.raises(ConfigError, match="calibrate=true measures a new curve"):
        spec_for("cache=magcache", "cache.calibrate=true", f"cache.ratios={path}")


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["cache=magcache", "cache.max_skips=0"], ["cache.max_skips=0"]),
        (["cache=lru"], ["lru", "fbcache", "magcache", "taylorseer"]),  # Hydra's group lists the choices
    ],
)
def test_cli_bad_cache_fails_fast_and_writes_nothing(tmp_path, overrides, words):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "parallel_wan.run", f"output_dir={out}", *overrides],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    for w in words:
        assert w in proc.stderr, proc.stderr
    assert not out.exists() and os.listdir(tmp_path) == []


IMAGE = None  # set by the first_frame fixture


@pytest.fixture(scope="module", autouse=True)
def first_frame(tmp_path_factory):
    """An image for the I2V preset (its settings need one to resolve)."""
    from PIL import Image

    global IMAGE
    IMAGE = str(tmp_path_factory.mktemp("frame") / "frame.png")
    Image.new("RGB", (64, 64), (90, 120, 150)).save(IMAGE)


def real_model_plan(model, steps=None, **cache):
    """The cache plan a real model preset's run makes with its defaults (no weights needed:
    the official schedule, which is what the official curves were calibrated on)."""
    overrides = [f"model={model}", "checkpoint_dir=/tmp", "cache=magcache"] + [
        f"cache.{k}={v}" for k, v in cache.items()
    ]
    if "_i2v_" in model:
        overrides.append(f"image={IMAGE}")
    if steps:
        overrides.append(f"steps={steps}")
    spec = spec_for(*overrides)
    spec = spec.replace(schedule="official")

    class NoScheduler:
        scheduler_config = None

    plan = step_plan(spec, make_schedule("official", spec.sampling.steps, spec.sampling.shift))
    return spec, step_cache_plan(spec, NoScheduler(), plan)


@pytest.mark.parametrize(
    "model, cache, steps, skipped",
    [
        # The official repository's T2V schedule with its settings (E006K2R04): 14 of 40.
        ("wan2.2_t2v_a14b", {}, None, [10, 11, 13, 14, 16, 17, 19, 20, 22, 23, 25, 32, 34, 36]),
        ("wan2.2_t2v_a14b", {"threshold": 0.04, "retention": 0.2}, None, 17),
        ("wan2.2_i2v_a14b", {}, None, 17),  # maxdiffusion's MagCache change: 17/40
        ("wan2.2_ti2v_5b", {}, None, 25),  # the official TI2V-5B E006K2R02: 25/50
    ],
)
def test_presets_give_the_published_schedules_through_the_step_plan(model, cache, steps, skipped):
    spec, plan = real_model_plan(model, steps, **cache)
    got = skipped_steps(plan)
    if isinstance(skipped, list):
        assert got == skipped
    else:
        assert len(got) == skipped, got
    assert spec.cache.curve_name is not None


def test_a_list_curve_splits_where_this_models_schedule_switches(tmp_path):
    """A two-expert curve without a split (a plain official-format list) splits at the high-noise
    step count of this model's schedule run for the curve's own number of steps."""
    from parallel_wan.caching import magcache_curves

    path = ratios_file(tmp_path, list(magcache_curves.T2V_A14B))
    _, from_file = real_model_plan("wan2.2_t2v_a14b", **{"ratios": path})
    _, official = real_model_plan("wan2.2_t2v_a14b")
    assert [s.action for s in from_file] == [s.action for s in official]


def test_taylorseer_plan_counts_per_expert_like_diffusers():
    # diffusers: compute if step < warmup or (step - warmup - 1) % interval == 0, per expert.
    plan = taylor_expert_plan(12, interval=3, warmup=2, order=2)
    assert [s.action for s in plan] == [
        COMPUTE,
        COMPUTE,
        PREDICT,
        COMPUTE,
        PREDICT,
        PREDICT,
        COMPUTE,
        PREDICT,
        PREDICT,
        COMPUTE,
        PREDICT,
        PREDICT,
    ]
    assert [s.terms for s in plan if s.action == COMPUTE] == [1, 2, 3, 3, 3]  # order 2 caps at 3 factors
    assert [s.delta for s in plan if s.action == COMPUTE] == [0, 1, 2, 3, 3]
    assert [s.offset for s in plan if s.action == PREDICT] == [1, 1, 2, 1, 2, 1, 2]
    two = cache_plan(CacheSettings("taylorseer", interval=3, warmup=2, order=1), ["high"] * 4 + ["low"] * 4)
    assert [s.action for s in two] == [COMPUTE, COMPUTE, PREDICT, COMPUTE] * 2  # the counter restarts
    assert [s.fresh for s in two] == [True, False, False, False] * 2


def test_first_block_and_dense_plans():
    fb = cache_plan(CacheSettings("fbcache", threshold=0.1), ["high", "high", "low"])
    assert [(s.action, s.fresh) for s in fb] == [(PROBE, True), (PROBE, False), (PROBE, True)]
    calibrating = CacheSettings("magcache", threshold=0.1, max_skips=2, calibrate=True)
    assert {s.action for s in cache_plan(calibrating, ["x"] * 5)} == {COMPUTE}
    mag = CacheSettings("magcache", threshold=1.0, max_skips=2, retention=0.0, curve=(1.0,) * 18, split=5)
    actions = [s.action for s in cache_plan(mag, ["high"] * 5 + ["low"] * 5)]
    # each expert: step 0 computes (no residual yet), then K = 2 skips, a compute, …
    assert actions == [COMPUTE, REUSE, REUSE, COMPUTE, REUSE] * 2


# A ratios file is checked against the run it serves before anything loads (issue 22 item 3):
# the curve's own schedule must give each expert a part, and the run's plan is built from it.
@pytest.mark.parametrize(
    "content, extra, words",
    [
        # 2 ratios = a 2-step curve; at 2 steps the tiny T2V's schedule runs both on the high-noise expert
        (
            [1.0, 0.99],
            ["steps=2"],
            ["holds a curve of 2 ratios", "2-step run", "high-noise", "cache.calibrate=true steps=2"],
        ),
        ([1.0, 0.99], ["steps=20"], ["holds a curve of 2 ratios", "no part for the other expert"]),
    ],
)
def test_a_ratios_file_that_cannot_serve_the_run_is_refused_before_loading(tmp_path, content, extra, words):
    from parallel_wan.run import compose_settings, validate_job

    path = ratios_file(tmp_path, content)
    raw = compose_settings(["cache=magcache", f"cache.ratios={path}", f"output_dir={tmp_path / 'out'}", *extra])
    with pytest.raises(ConfigError) as err:
        validate_job(raw, 1)
    msg = str(err.value)
    assert "\n" not in msg and not (tmp_path / "out").exists()
    for w in [f"cache.ratios={path}", *words]:
        assert w in msg, msg


def test_a_short_ratios_file_stops_the_cli_in_one_line_with_exit_2(tmp_path):
    """The user's case: `cache.ratios=` a JSON [1.0, 0.99] with steps=2 ended in a ValueError
    traceback after the model loaded (exit 1)."""
    path = ratios_file(tmp_path, [1.0, 0.99])
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "parallel_wan.run",
            "cache=magcache",
            f"cache.ratios={path}",
            "steps=2",
            f"output_dir={out}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": REPO},
        cwd=tmp_path,
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("parallel_wan: error: cache.ratios="), proc.stderr[-3000:]
    assert "loaded" not in proc.stderr and not out.exists()


def test_a_two_expert_curve_serves_a_run_on_one_expert_with_that_experts_part():
    """A run whose steps all fall on the high-noise (or low-noise) expert reads that expert's part
    of a two-expert curve, as a run on both experts does — not the whole curve."""
    curve = (1.0, 1.0) * 4 + (0.5, 0.5) * 5  # high part: ratios 1 (skippable); low part: 0.5 (never skip)
    mag = CacheSettings("magcache", threshold=0.1, max_skips=3, retention=0.0, curve=curve, split=5)
    order = ("high", "low")
    assert [s.action for s in cache_plan(mag, ["high"] * 4, expert_order=order)] == [COMPUTE, REUSE, REUSE, REUSE]
    assert [s.action for s in cache_plan(mag, ["low"] * 4, expert_order=order)] == [COMPUTE] * 4
    both = cache_plan(mag, ["high"] * 4 + ["low"] * 4, expert_order=order)
    assert [s.action for s in both] == [COMPUTE, REUSE, REUSE, REUSE] + [COMPUTE] * 4
