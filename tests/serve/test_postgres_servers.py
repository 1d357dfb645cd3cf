"""Replicas sharing a PostgreSQL queue (`queue_url=`, a throwaway cluster of Debian's postgresql:
harness/postgres.py) and one storage_dir, as servers on several hosts would: two servers — one
of them torchrun with 2 gloo ranks — run 20 jobs exactly once while PostgreSQL restarts under
them; kill -9 of a server mid-job and the other completes that job once its lease lapses."""

import re

import pytest
from harness.hold import Hold
from harness.postgres import running
from harness.serve import SETTINGS, Server

from parallel_wan.serve.store import Store


@pytest.fixture
def cluster():
    with running() as pg:
        yield pg


def started(servers) -> list[list[str]]:
    return [re.findall(r"(video_[0-9a-f]{32}): started", server.text()) for server in servers]


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_two_servers_run_twenty_jobs_exactly_once_through_a_postgresql_restart(tmp_path, cluster):
    storage, start = tmp_path / "storage", [*SETTINGS, f"queue_url={cluster.url}"]
    servers = [Server(storage, start, ranks=2, tag="a"), Server(storage, start, tag="b")]
    try:
        for server in servers:
            server.wait_ready()
        ids = [servers[i % 2].post(prompt=f"shared {i}", seed=i, num_inference_steps=2)["id"] for i in range(10)]
        cluster.stop()  # jobs queued, some running: every server's next store operation waits for it
        cluster.start()
        ids += [servers[i % 2].post(prompt=f"shared {i}", seed=i, num_inference_steps=2)["id"] for i in range(10, 20)]
        for video_id in ids:
            video = servers[0].wait_for(video_id, "completed", "failed")
            assert video["status"] == "completed", video
    finally:
        for server in servers:
            server.stop()
    claims = started(servers)
    assert sorted(claims[0] + claims[1]) == sorted(ids), claims  # each once, by one of them
    assert claims[0] and claims[1], claims  # both took part
    assert all(row["attempts"] == 1 for row in Store(cluster.url).page(100)[0])
    assert any("the queue's database is out of reach" in server.text() for server in servers)  # it was felt


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_kill_9_of_a_server_mid_job_and_the_other_completes_it_after_the_lease(tmp_path, cluster):
    storage, start = tmp_path / "storage", [*SETTINGS, f"queue_url={cluster.url}", "lease_s=4"]
    hold, other = Hold(tmp_path, step=1), None
    first = Server(storage, start, tag="a", env=hold.env()).wait_ready()
    try:
        job = first.post(prompt="its server dies", seed=3, num_inference_steps=4)
        hold.wait_held(alive=first.alive, context=first.text)
        other = Server(storage, start, tag="b").wait_ready()
        assert other.video(job["id"])["status"] == "in_progress"  # the first server's, while it lives
        first.stop()  # kill -9 of every process of it: no heartbeat any more
        done = other.wait_for(job["id"], "completed", "failed")
        assert (done["status"], done["progress"]) == ("completed", 100), done
        assert started([other]) == [[job["id"]]]
        assert Store(cluster.url).get(job["id"])["attempts"] == 2
    finally:
        first.stop()
        hold.release_all()
        if other is not None:
            other.stop()
