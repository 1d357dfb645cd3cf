"""Issue 38 item 13: the small things a new user met — a resumed run's progress bar, counts in
plain words, the seed's bound, a cache setting given to a cache without it, where a
calibration's curve went."""

import io

import pytest
from harness.cli import run_in_process
from harness.settings import assert_words, refusal

from parallel_wan.backends.device_facts import DeviceSpeed
from parallel_wan.config import ConfigError
from parallel_wan.config.compose import compose_settings


def test_a_resumed_loops_progress_bar_ends_at_its_total(monkeypatch):
    import sys

    from parallel_wan.jobs.entry_outputs import progress_bar

    shown = io.StringIO()
    monkeypatch.setattr(sys, "stderr", shown)
    for _ in progress_bar(30, enabled=True)(range(8, 30)):  # resumed after step 8 of 30
        pass
    assert "30/30" in shown.getvalue() and "22/30" not in shown.getvalue(), shown.getvalue()[-200:]


@pytest.mark.parametrize(
    "overrides, words, absent",
    [
        (
            ["cache=taylorseer", "cache.threshold=0.1"],
            [
                "cache.threshold is not a setting of cache=taylorseer",
                "cache=fbcache and cache=magcache have it",
                "cache=taylorseer takes: interval, warmup, order",
            ],
            "is not a setting;",
        ),
        (
            ["cache.order=2"],
            ["cache.order is not a setting of cache=none", "cache=taylorseer has it"],
            "is not a setting;",
        ),
    ],
)
def test_a_cache_setting_given_to_a_cache_without_it_says_which_caches_have_it(overrides, words, absent):
    with pytest.raises(ConfigError) as refused:
        compose_settings(overrides)
    assert_words(str(refused.value), words)
    assert absent not in str(refused.value)


def test_the_seeds_bound_says_why_in_words(tmp_path):
    msg = refusal([f"seed={2**63 - 1}", "prompt=[a,b,c]"], tmp_path)
    assert_words(msg, [f"must be between 0 and {2**63 - 3}", "prompt i of the 3 is seeded seed + i", "64-bit"])
    assert "2^63" not in msg and "−" not in msg


def test_counts_of_one_read_as_one():
    from parallel_wan.memory_plan.cli import plan_report

    text, _ = plan_report(compose_settings(["mesh=single"]), 24, measure=lambda: DeviceSpeed(1e10, "a test CPU", True))
    assert "1 device)" in text and "over 1 rank of the job" in text
    assert "1 devices" not in text and "1 ranks" not in text


def test_a_finished_one_line_job_says_its_entry_is_done(tmp_path):
    (tmp_path / "p.txt").write_text("a cat\n")
    args = [f"prompts={tmp_path / 'p.txt'}", "num_frames=5", "height=32", "width=32", "steps=2", "backend=torch"]
    run_in_process(tmp_path / "out", *args)
    logged = run_in_process(tmp_path / "out", *args)
    assert f"job complete: the 1 entry in {tmp_path / 'out'} is done" in logged, logged
    assert "1 entries" not in logged and "all 1 entry" not in logged


def test_a_calibration_run_says_where_its_curve_went(tmp_path):
    logged = run_in_process(
        tmp_path / "out",
        "cache=magcache",
        "cache.calibrate=true",
        "num_frames=5",
        "height=32",
        "width=32",
        "steps=4",
        "backend=torch",
    )
    curve = tmp_path / "out" / "mag_ratios.json"
    assert curve.is_file()
    assert (
        f"the measured MagCache curve (6 ratios) is in {curve}; use it with cache=magcache cache.ratios={curve}"
        in logged
    ), logged
