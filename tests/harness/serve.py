"""Servers as users start them (`python -m parallel_wan.serve`, under torchrun, or as torchrun's
ranks without its agent so each rank's exit code and pid are the test's), and a client that
waits: for /health, for a job's status, for a log line."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from harness.launchers import LAUNCH_VARS
from harness.paths import REPO
from harness.ranks import free_port

# The tiny model, small and fp32 (the CLI's reference settings: harness.cli), a dead peer
# noticed within a minute.
SETTINGS = ["model=tiny", "dtype=float32", "steps=4", "num_frames=9", "height=64", "width=64", "save_frames=true",
            "dist_timeout_s=60"]
KEY = "test-key-0123456789"


def environment(**extra) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCH_VARS)}
    base.pop("PARALLEL_WAN_API_KEY", None)
    return base | {"PYTHONPATH": REPO, "OMP_NUM_THREADS": "1"} | extra


class Server:
    """A started server: its processes (rank order; under torchrun the agent), its log, a client."""

    def __init__(self, storage: Path, settings, ranks: int = 1, agent: bool = True, key: str | None = None,
                 port: int | None = None, env: dict | None = None, tag: str = "server"):
        self.storage, self.port = Path(storage), port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = self.storage.parent / f"{self.storage.name}-{tag}-{self.port}.log"
        words = [*settings, f"port={self.port}", f"storage_dir={storage}"]
        env = environment(**({"PARALLEL_WAN_API_KEY": key} if key else {}), **(env or {}))
        self.stderr = open(self.log, "a")
        if ranks == 1:
            cmds, envs = [[sys.executable, "-m", "parallel_wan.serve", *words]], [env]
        elif agent:
            cmds = [[sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
                     "-m", "parallel_wan.serve", *words]]
            envs = [env]
        else:  # torchrun's environment contract, one process per rank, no agent between the test and them
            master = free_port()
            cmds = [[sys.executable, "-m", "parallel_wan.serve", *words]] * ranks
            envs = [env | {"RANK": str(r), "WORLD_SIZE": str(ranks), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(ranks),
                           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(master)} for r in range(ranks)]
        self.procs = [subprocess.Popen(cmd, env=e, stdout=subprocess.DEVNULL, stderr=self.stderr, cwd=storage.parent,
                                       start_new_session=True)
                      for cmd, e in zip(cmds, envs)]
        self.client = httpx.Client(base_url=self.url, timeout=60,
                                   headers={"Authorization": f"Bearer {key}"} if key else {})

    def text(self) -> str:
        return self.log.read_text()

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def fail(self, what: str):
        pytest.fail(f"{what}\n--- server log ---\n{self.text()[-6000:]}")

    def wait_ready(self, timeout: float = 400) -> "Server":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                self.fail(f"the server ended ({[p.poll() for p in self.procs]}) before it was ready")
            try:
                if self.client.get("/health").status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.25)
        self.fail("the server was not ready in time")

    def post(self, **fields) -> dict:
        answer = self.client.post("/v1/videos", json=fields)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def video(self, video_id: str) -> dict:
        answer = self.client.get(f"/v1/videos/{video_id}")
        assert answer.status_code == 200, answer.text
        return answer.json()

    def wait_for(self, video_id: str, *statuses, timeout: float = 400, every: float = 0.1, seen=None) -> dict:
        """The job once its status is one of `statuses`; `seen` (a list) collects every progress read."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                self.fail(f"the server ended while {video_id} was awaited")
            video = self.video(video_id)
            if seen is not None:
                seen.append((video["status"], video["progress"], video["step"]))
            if video["status"] in statuses:
                return video
            time.sleep(every)
        self.fail(f"{video_id} never became {statuses}: {self.video(video_id)}")

    def wait_log(self, pattern: str, timeout: float = 300) -> str:
        import re

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.text())
            if m:
                return m
            if not self.alive():
                self.fail(f"the server ended before {pattern!r}")
            time.sleep(0.2)
        self.fail(f"{pattern!r} never showed")

    def frames(self, video_id: str) -> np.ndarray:
        return np.load(self.storage / "videos" / f"{video_id}.frames.npy")

    def signal(self, signum=signal.SIGTERM, rank: int | None = 0) -> None:
        """`signum` to one rank (None: every process)."""
        for i, p in enumerate(self.procs):
            if rank is None or i == rank:
                p.send_signal(signum)

    def wait_exit(self, timeout: float = 180) -> list[int]:
        try:
            return [p.wait(timeout=timeout) for p in self.procs]
        finally:
            self.stop()

    def stop(self) -> None:
        """SIGKILL whatever still runs (the torchrun agent's workers too: each process leads its group)."""
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=30)
        self.client.close()
        self.stderr.close()


def sidecar(server: Server, video_id: str) -> dict:
    return json.loads((server.storage / "videos" / f"{video_id}.json").read_text())
