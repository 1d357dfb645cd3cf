"""A JAX server on two hosts (two processes on this CPU joined by `jax.distributed`, two devices
each, mesh cp4): the leader alone binds the port and claims each job, `same_on_every_rank`
hands its pick to the other host through JAX's process collectives, and both hosts run one
SPMD program per video — the one-host JAX run's video, bit for bit."""

import os
import subprocess
import sys

import numpy as np
import pytest
from harness.serve import SETTINGS, Server

pytestmark = pytest.mark.slow

START = [*SETTINGS, "backend=jax", "mesh=cp4"]


def _one_host_frames(tmp_path, name: str, prompt: str, seed: int) -> np.ndarray:
    out = tmp_path / name
    env = os.environ | {"XLA_FLAGS": "--xla_force_host_platform_device_count=4", "OMP_NUM_THREADS": "1"}
    env = {k: v for k, v in env.items() if not k.startswith("JAX_")}
    done = subprocess.run(
        [sys.executable, "-m", "parallel_wan.run", *START, f"prompt='{prompt}'", f"seed={seed}", f"output_dir={out}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return np.load(out / "frames.npy")


def test_a_jax_server_on_two_hosts_claims_each_job_once_and_renders_the_one_host_video(tmp_path):
    server = Server(tmp_path / "storage", START, jax_hosts=2).wait_ready(timeout=600)
    try:
        first = server.post(prompt="a harbour at night", seed=6)
        second = server.post(prompt="a lighthouse", seed=5)
        for video in (first, second):
            assert server.wait_for(video["id"], "completed", timeout=600)["progress"] == 100
        frames = {v["id"]: server.frames(v["id"]) for v in (first, second)}
        listed = server.client.get("/v1/videos").json()["data"]
        log = server.text()
    finally:
        server.stop()
    # one claim per job: the leader's "started" line once each, two jobs in the queue
    assert sorted(v["id"] for v in listed) == sorted([first["id"], second["id"]])
    for video in (first, second):
        assert log.count(f"{video['id']}: started") == 1, log[-3000:]
    # the first video against the one-host run; the second job proves the leader's next pick
    # reached the other host too (it completed, claimed once), and renders other frames
    expected = _one_host_frames(tmp_path, first["id"], "a harbour at night", 6)
    assert np.array_equal(frames[first["id"]], expected), "two-host server vs one-host run"
    assert not np.array_equal(frames[second["id"]], expected)
