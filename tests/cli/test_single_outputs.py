"""Issue 38 item 3: a command-line run given output_dir= that already holds a video never
replaces it silently and never leaves another run's file beside its own (jobs/single_outputs.py).

In one process (run.validate_job + jobs.run_job, what `python -m parallel_wan.run` does after
its flags); the CLI's exit code 2 for the refusal is checked once through the real command."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from parallel_wan.config import ConfigError
from parallel_wan.jobs import run_job
from parallel_wan.run import compose_settings, validate_job

# the loop's work is not the subject: a tiny video, two steps
SMALL = ["num_frames=5", "height=32", "width=32", "steps=2", "backend=torch"]


def run_into(out, *overrides):
    return run_job(*validate_job(compose_settings([f"output_dir={out}", *SMALL, *overrides]), 1, env={}))


def snapshot(folder):
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.iterdir() if p.is_file()}


def test_a_run_with_other_settings_is_refused_naming_them_and_changes_nothing(tmp_path):
    out = tmp_path / "out"
    run_into(out, "seed=1", "save_frames=true")
    before = snapshot(out)
    with pytest.raises(ConfigError) as refused:
        validate_job(compose_settings([f"output_dir={out}", *SMALL, "seed=2"]), 1, env={})
    message = str(refused.value)
    assert f"output_dir={out} already holds video.mp4 and video.json" in message, message
    assert (
        "seed: 1 → 2" in message
        and "Set another output_dir" in message
        and "delete video.mp4 and video.json" in message
    )
    assert snapshot(out) == before


def test_the_command_line_refuses_it_with_exit_code_2_and_one_line(tmp_path):
    out = tmp_path / "out"
    run_into(out, "seed=1")
    before = snapshot(out)
    proc = subprocess.run(
        [sys.executable, "-m", "parallel_wan.run", f"output_dir={out}", *SMALL, "seed=3"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("parallel_wan: error: output_dir=") and "seed: 1 → 3" in lines[0], (
        lines
    )
    assert snapshot(out) == before


def test_the_same_settings_again_find_the_video_made_and_run_nothing(tmp_path, caplog):
    out = tmp_path / "out"
    run_into(out)
    before = snapshot(out)
    caplog.set_level("INFO", logger="parallel_wan")
    report = run_into(out)
    assert report.made == [] and report.skipped == ["video"]
    assert "video.mp4 in output_dir=" in caplog.text and "was made before with these settings" in caplog.text
    assert snapshot(out) == before


def test_asking_for_the_frames_of_a_video_made_without_them_makes_it_again(tmp_path):
    out = tmp_path / "out"
    run_into(out)
    report = run_into(out, "save_frames=true")
    assert report.made == ["video"] and (out / "frames.npy").is_file()


def test_an_unfinished_earlier_runs_files_are_replaced_and_none_is_left_beside_the_new_video(tmp_path):
    out = tmp_path / "out"
    run_into(out, "seed=1", "save_frames=true")
    # the earlier run stopped between its renames: the video and frames are there, the sidecar is not
    os.remove(out / "video.json")
    (out / "video_000.mp4").write_bytes(b"an earlier batch's video")
    run_into(out, "seed=2")
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == ["video.json", "video.mp4"]
    record = json.loads((out / "video.json").read_text())
    assert record["seed"] == 2 and record["job"]["settings"]["seed"] == 2


def test_a_damaged_video_of_the_same_settings_is_made_again_and_its_stale_frames_go(tmp_path):
    out = tmp_path / "out"
    run_into(out, "save_frames=true")
    frames = np.load(out / "frames.npy")
    (out / "video.mp4").write_bytes(b"damaged")
    report = run_into(out)  # the same video, without save_frames: frames.npy is not this run's file
    assert report.made == ["video"] and not (out / "frames.npy").exists()
    record = json.loads((out / "video.json").read_text())
    assert "frames" not in record["files"] and record["frames_sha256"] == __import__(
        "parallel_wan.report.outputs", fromlist=["frames_sha256"]
    ).frames_sha256(frames)


def test_a_sidecar_that_records_no_settings_is_refused_too(tmp_path):
    out = tmp_path / "out"
    run_into(out)
    record = json.loads((out / "video.json").read_text())
    del record["job"]
    (out / "video.json").write_text(json.dumps(record))
    with pytest.raises(ConfigError, match="settings it does not record"):
        validate_job(compose_settings([f"output_dir={out}", *SMALL]), 1, env={})
