"""Backpressure, retention and a full disk on a real server: `torchrun --nproc-per-node 2 -m
parallel_wan.serve max_queued=1 keep_hours=0.001` (gloo ranks, the tiny model), its storage_dir a
32 MB tmpfs of its own that the test fills for real (ENOSPC from the kernel, not a mock; mounting
needs root, as CI runs — a machine without it fails here saying so, never skips)."""

import os
import re
import subprocess
import time

import openai
import pytest
from harness.hold import Hold
from harness.serve import SETTINGS, Server

pytestmark = pytest.mark.filterwarnings("ignore:The Sora API:DeprecationWarning")
ROOM_KB = 64  # left free when the disk fills: less than one video's files (frames.npy alone: 108 KB),
# more than the queue's own writes need meanwhile (its WAL reuses the pages it has)


@pytest.fixture
def tmpfs(tmp_path):
    folder = tmp_path / "storage"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(folder)], capture_output=True)
    if done.returncode:
        pytest.fail(f"mount -t tmpfs failed ({done.stderr.decode().strip()}): this test needs root, as CI runs")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder, room: int):
    """A file that leaves `room` bytes free on the folder's file system (tmpfs keeps zeros)."""
    stats = os.statvfs(folder)
    path = folder / "filler"
    with open(path, "wb") as f:
        f.write(b"\0" * (stats.f_bavail * stats.f_frsize - room))
    return path


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_full_queue_a_full_disk_and_expiry(tmp_path, tmpfs):
    decoding = Hold(tmp_path, step="decode")  # every job holds after its last step, before its decode
    start = [*SETTINGS, "max_queued=1", "keep_hours=0.001"]  # 3.6 s: expires_at = completed_at + 4
    server = Server(tmpfs, start, ranks=2, env=decoding.env()).wait_ready()
    try:
        first = server.post(prompt="the disk fills while this one decodes", seed=1)
        decoding.wait_held(processes=2, alive=server.alive, context=server.text)
        key = {"Idempotency-Key": "second"}
        second = server.client.post("/v1/videos", json={"prompt": "queued behind it", "seed": 2}, headers=key)
        assert second.status_code == 200, second.text
        # max_queued=1 and one waits: 429 with Retry-After (no job finished yet: 30 s) in OpenAI's shape
        full = server.client.post("/v1/videos", json={"prompt": "one too many"})
        code = full.json()["error"]["code"]
        assert (full.status_code, full.headers["retry-after"], code) == (429, "30", "queue_full"), full.text
        again = server.client.post("/v1/videos", json={"prompt": "queued behind it", "seed": 2}, headers=key)
        assert again.json()["id"] == second.json()["id"]  # a retry of an accepted request is answered
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.RateLimitError):
            client.videos.create(prompt="still too many")

        # the disk fills while the first job decodes: it fails saying why, nothing of it is kept
        filler = fill(tmpfs, ROOM_KB * 1024)
        decoding.release()
        failed = server.wait_for(first["id"], "failed")
        message = failed["error"]["message"]
        assert "could not write the video (No space left on device); nothing of it was kept" in message, message
        assert str(tmpfs) not in message  # no server path
        assert not list((tmpfs / "videos").glob(f"{first['id']}*"))
        # the job queued behind it is not lost: it runs, and once there is room it completes
        decoding.wait_held(processes=2, alive=server.alive, context=server.text)
        filler.unlink()
        decoding.release_all()
        done = server.wait_for(second.json()["id"], "completed")
        assert done["expires_at"] == done["completed_at"] + 4
        assert (tmpfs / "videos" / f"{done['id']}.mp4").exists()

        # keep_hours: past expires_at the video is gone for clients, and the server removes its files
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (tmpfs / "videos" / f"{done['id']}.mp4").exists():
            time.sleep(0.1)
        assert server.client.get(f"/v1/videos/{done['id']}").status_code == 404
        assert not list((tmpfs / "videos").glob(f"{done['id']}*"))
        assert server.client.get("/v1/videos").json()["data"] == []  # the failed one expired too
        assert server.client.post("/v1/videos", json={"prompt": "room again"}).status_code == 200
        metrics = server.client.get("/metrics").text
        assert 'parallel_wan_requests_total{answer="queue_full"} 2.0' in metrics
        assert 'parallel_wan_jobs_total{outcome="expired"}' in metrics
        waited = re.search(r"^parallel_wan_queue_wait_seconds_count (\S+)$", metrics, re.M)
        assert waited and float(waited.group(1)) >= 2, waited  # each job that ran (the last may have too)
    finally:
        decoding.release_all()
        server.stop()
