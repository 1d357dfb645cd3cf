"""A single run's default output folder (outputs/<date>_<time>) belongs to that run alone
(issue 22 item 1): two runs started in the same second composed the same name and one video
was silently overwritten. Each run now creates its folder exclusively and takes a -2, -3, …
suffix when the name is taken."""

import json
import multiprocessing
import os
import subprocess
import sys
import time

import pytest

from parallel_wan.jobs.output_folder import claim_folder, release_if_empty
from parallel_wan.run import CONF_DIR

REPO = os.path.dirname(CONF_DIR)


def _claim(path, barrier, results):
    barrier.wait()  # every process asks at the same moment
    results.put(claim_folder(path))


def test_processes_claiming_one_name_at_once_get_a_folder_each(tmp_path):
    context = multiprocessing.get_context("spawn")
    count = 6
    barrier, results = context.Barrier(count), context.Queue()
    path = str(tmp_path / "outputs" / "2026-01-01_00-00-00")
    workers = [context.Process(target=_claim, args=(path, barrier, results)) for _ in range(count)]
    for worker in workers:
        worker.start()
    claimed = sorted(results.get(timeout=60) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
    assert len(set(claimed)) == count
    assert sorted(os.listdir(tmp_path / "outputs")) == sorted(os.path.basename(p) for p in claimed)
    assert path in claimed and f"{path}-{count}" in claimed


def test_release_removes_only_an_empty_folder(tmp_path):
    kept, empty = tmp_path / "kept", tmp_path / "empty"
    kept.mkdir(), empty.mkdir()
    (kept / "video.mp4").write_bytes(b"x")
    release_if_empty(str(kept)), release_if_empty(str(empty))
    assert kept.is_dir() and not empty.exists()


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_runs_started_together_never_write_into_another_runs_folder(tmp_path):
    """Three runs without output_dir= start at once, while every outputs/<date_time> name of the
    next minute is already taken by an earlier run's folder holding its video: each run makes a
    folder of its own and every earlier video is untouched (before: the runs wrote into the
    folder of their second, overwriting its video.mp4 — and each other's)."""
    outputs = tmp_path / "outputs"
    now = time.time()
    taken = {time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(now + s)) for s in range(-2, 90)}
    for name in taken:
        (outputs / name).mkdir(parents=True)
        (outputs / name / "video.mp4").write_bytes(b"an earlier run's video")
    common = ["steps=1", "num_frames=1", "height=32", "width=32", "backend=torch"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "parallel_wan.run", f"seed={seed}", *common],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": REPO},
        )
        for seed in (1, 2, 3)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    for name in taken:
        assert (outputs / name / "video.mp4").read_bytes() == b"an earlier run's video", name
        assert os.listdir(outputs / name) == ["video.mp4"], name
    made = sorted(set(os.listdir(outputs)) - taken)
    assert len(made) == 3, made
    seeds = sorted(json.loads((outputs / name / "video.json").read_text())["seed"] for name in made)
    assert seeds == [1, 2, 3]
    for name in made:
        assert name.rsplit("-", 1)[0] in taken, name  # the taken name of its second, with a suffix
        sidecar = json.loads((outputs / name / "video.json").read_text())
        assert sidecar["config"]["output_dir"] == str(outputs / name)
