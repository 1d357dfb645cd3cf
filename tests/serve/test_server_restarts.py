"""Nothing accepted is lost (4 gloo ranks started as torchrun starts them, without its agent, so
each rank's exit code is the test's): SIGTERM mid-job stops every rank after the same step,
saves the loop state and exits 75, and the restarted server resumes that job to the
uninterrupted frames, bit for bit; a rank killed mid-job ends the server with a non-zero exit
and a message, kill -9 of the whole server loses nothing, and every accepted job completes after
the restarts; two servers sharing one storage_dir run each job exactly once."""

import re
import signal
import time

import numpy as np
import pytest
from harness.hold import Hold
from harness.serve import SETTINGS, Server

STEPS = 8  # the jobs the tests stop: they hold at a step before the last (harness/hold.py)


def gone(server: Server, rank: int) -> None:
    """Until rank `rank` of the server (started without an agent) has exited."""
    server.procs[rank].wait(timeout=60)


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_sigterm_mid_job_exits_75_on_every_rank_and_the_restart_resumes_bit_for_bit(tmp_path):
    storage = tmp_path / "storage"
    hold = Hold(tmp_path, step=3, released=1)  # the reference runs through; the cut job holds before step 3
    server = Server(storage, SETTINGS, ranks=4, agent=False, env=hold.env()).wait_ready()
    try:
        job = {"prompt": "a fox in the snow", "seed": 9, "num_inference_steps": STEPS}
        reference = server.post(**job)
        server.wait_for(reference["id"], "completed")
        cut, queued = server.post(**job), server.post(prompt="after the restart", seed=4)
        hold.wait_held(processes=4, arrival=2, alive=server.alive, context=server.text)
        server.signal(signal.SIGTERM, rank=0)  # `kill PID` of the server: rank 0 alone gets it, the vote tells the rest
        hold.wait_signal("SIGTERM", alive=server.alive, context=server.text)
        hold.release()
        assert server.wait_exit() == [75, 75, 75, 75], server.text()[-3000:]
    finally:
        server.stop()
    stopped = int(re.search(rf"stopped after step (\d+) of {STEPS} of {cut['id']}", server.text()).group(1))
    assert 3 <= stopped < STEPS
    state = storage / "videos" / ".parallel_wan" / "resume" / cut["id"]
    assert sorted(p.name for p in state.iterdir()) == sorted(
        f"state.rank{r}.{x}" for r in range(4) for x in ("json", "safetensors")
    )

    again = Server(storage, SETTINGS, ranks=4, agent=False, port=server.port).wait_ready()
    try:
        video = again.wait_for(cut["id"], "completed")
        assert video["resumed_from_step"] == stopped == video["record"]["resumed_from_step"]
        assert np.array_equal(again.frames(cut["id"]), again.frames(reference["id"]))
        assert again.wait_for(queued["id"], "completed")["resumed_from_step"] is None
        assert not state.exists()
    finally:
        again.stop()


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_dead_rank_and_kill_9_lose_no_accepted_job(tmp_path):
    storage = tmp_path / "storage"
    hold = Hold(tmp_path, step=2, name="first")
    server = Server(storage, SETTINGS, ranks=4, agent=False, env=hold.env()).wait_ready()
    try:
        # job 0 holds before its step 2 on every rank; rank 1 is killed there, then the others go on
        # into the step's collectives without it
        jobs = [server.post(prompt=f"job {i}", seed=i, num_inference_steps=STEPS) for i in range(3)]
        hold.wait_held(processes=4, alive=server.alive, context=server.text)
        server.signal(signal.SIGKILL, rank=1)
        gone(server, 1)
        hold.release()
        codes = server.wait_exit(timeout=120)
    finally:
        server.stop()
    assert codes[1] == -signal.SIGKILL and all(c not in (0, 75) for c in codes), codes
    assert "a collective failed or a rank is gone" in server.text()
    assert f"the server stops while running {jobs[0]['id']}" in server.text()

    # job 0 runs again from the start and through; job 1, right after it, holds before its step 2
    hold = Hold(tmp_path, step=2, released=1, name="again")
    again = Server(storage, SETTINGS, ranks=4, agent=False, port=server.port, env=hold.env()).wait_ready()
    try:
        assert again.wait_for(jobs[0]["id"], "completed")["progress"] == 100  # run again from the start
        hold.wait_held(processes=4, arrival=2, alive=again.alive, context=again.text)
        assert again.video(jobs[1]["id"])["status"] == "in_progress"
        again.signal(signal.SIGKILL, rank=None)  # kill -9 of every process: nothing runs any more code
        again.wait_exit(timeout=60)
    finally:
        again.stop()

    last = Server(storage, SETTINGS, ranks=4, agent=False, port=server.port).wait_ready()
    try:
        for job in jobs:
            video = last.wait_for(job["id"], "completed", "failed")
            assert video["status"] == "completed" and video["resumed_from_step"] is None, video
    finally:
        last.stop()
    assert f"queued again: {jobs[1]['id']}" in last.text()


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_two_servers_sharing_a_storage_dir_run_each_job_exactly_once(tmp_path):
    storage = tmp_path / "storage"
    # Each server's loops hold before step 0 until both servers hold a job: then both took part,
    # whichever claims first; after that every loop goes through.
    holds = {name: Hold(tmp_path, step=0, name=name) for name in ("a", "b")}
    servers = [Server(storage, SETTINGS, tag=name, env=holds[name].env()) for name in ("a", "b")]
    try:
        for server in servers:
            server.wait_ready()
        ids = [servers[0].post(prompt="shared 0", seed=0, num_inference_steps=2)["id"]]
        first = _first_to_hold(holds, servers)
        ids.append(servers[1].post(prompt="shared 1", seed=1, num_inference_steps=2)["id"])
        holds["b" if first == "a" else "a"].wait_held(alive=lambda: all(s.alive() for s in servers))
        for hold in holds.values():
            hold.release_all()
        ids += [servers[i % 2].post(prompt=f"shared {i}", seed=i, num_inference_steps=2)["id"] for i in range(2, 10)]
        for video_id in ids:
            assert servers[0].wait_for(video_id, "completed")["progress"] == 100
    finally:
        for server in servers:
            server.stop()
    started = [re.findall(r"(video_[0-9a-f]{32}): started", server.text()) for server in servers]
    assert sorted(started[0] + started[1]) == sorted(ids), started  # each once, by one of them
    assert started[0] and started[1], started  # both took part


def _first_to_hold(holds: dict, servers) -> str:
    """The name of the server whose loop holds first (the one that claimed the first job)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        for name, hold in holds.items():
            if hold.notes():
                hold.wait_held()
                return name
        if not all(server.alive() for server in servers):
            pytest.fail("a server ended before it claimed the first job:\n" + servers[0].text()[-3000:])
        time.sleep(0.02)
    pytest.fail("no server claimed the first job")
