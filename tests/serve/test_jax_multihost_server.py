"""A JAX server on two hosts (two processes on this CPU joined by `jax.distributed`, two devices
each, mesh cp4): the leader alone binds the port and claims each job, `same_on_every_rank`
hands its pick to the other host through JAX's process collectives, and both hosts run one
SPMD program per video — the one-host JAX run's video, bit for bit."""

import numpy as np
import pytest
from harness import one_host
from harness.serve import SETTINGS, Server

pytestmark = pytest.mark.slow

# The server's settings as the one-host run's (harness/one_host.py: the session renders that
# video once, for this test and tests/parallel/test_jax_multihost.py)
_KEYS = {s.split("=")[0] for s in one_host.RUN}
START = [s for s in SETTINGS if s.split("=")[0] not in _KEYS] + one_host.RUN


def test_a_jax_server_on_two_hosts_claims_each_job_once_and_renders_the_one_host_video(tmp_path, tmp_path_factory):
    server = Server(tmp_path / "storage", START, jax_hosts=2).wait_ready(timeout=600)
    try:
        first = server.post(prompt=one_host.PROMPT, seed=one_host.SEED)
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
    expected = one_host.frames(one_host.one_host_video(tmp_path_factory))
    assert np.array_equal(frames[first["id"]], expected), "two-host server vs one-host run"
    assert not np.array_equal(frames[second["id"]], expected)
