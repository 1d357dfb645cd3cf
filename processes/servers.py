"""Servers (`python -m parallel_wan.serve`) as users start them — one process, under torchrun,
or as torchrun's ranks without its agent, so each rank's pid and exit code are the caller's —
and a client that waits: for /health, for a job's status, for a log line. For the benchmarks
and, through tests/harness/serve.py, the tests.

Every wait raises ServerFailed with the end of the server's log when the server ends first or
the time runs out."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Variables a launcher sets for its processes: the caller's own must not leak into a server's.
LAUNCH_VARS = (
    "SLURM_",
    "TORCHELASTIC_",
    "JAX_",
    "TPU_",
    "MEGASCALE_",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GROUP_RANK",
    "LOCAL_WORLD_SIZE",
)


class ServerFailed(AssertionError):
    """The server ended, or did not do what was awaited in time; the message ends with its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(**extra) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCH_VARS)}
    base.pop("PARALLEL_WAN_API_KEY", None)
    return base | {"PYTHONPATH": REPO, "OMP_NUM_THREADS": "1"} | extra


class ServerProcesses:
    """A started server: its processes (rank order; under torchrun the agent), its log, a client."""

    def __init__(
        self,
        storage,
        settings,
        ranks: int = 1,
        agent: bool = True,
        key: str | None = None,
        port: int | None = None,
        env: dict | None = None,
        tag: str = "server",
        jax_hosts: int = 1,
        devices_per_host: int = 2,
    ):
        self.storage, self.port = Path(storage), port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = self.storage.parent / f"{self.storage.name}-{tag}-{self.port}.log"
        words = [*settings, f"port={self.port}", f"storage_dir={storage}"]
        env = environment(**({"PARALLEL_WAN_API_KEY": key} if key else {}), **(env or {}))
        self.stderr = open(self.log, "a")
        if jax_hosts > 1:  # backend=jax on several hosts: the variables a launcher sets, per host
            coordinator = free_port()
            cmds = [[sys.executable, "-m", "parallel_wan.serve", *words]] * jax_hosts
            envs = [
                env
                | {
                    "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{coordinator}",
                    "JAX_NUM_PROCESSES": str(jax_hosts),
                    "JAX_PROCESS_ID": str(h),
                    "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices_per_host}",
                }
                for h in range(jax_hosts)
            ]
        elif ranks == 1:
            cmds, envs = [[sys.executable, "-m", "parallel_wan.serve", *words]], [env]
        elif agent:
            cmds = [
                [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    "--standalone",
                    "--nproc-per-node",
                    str(ranks),
                    "-m",
                    "parallel_wan.serve",
                    *words,
                ]
            ]
            envs = [env]
        else:  # torchrun's environment contract, one process per rank, no agent in between
            master = free_port()
            cmds = [[sys.executable, "-m", "parallel_wan.serve", *words]] * ranks
            envs = [
                env
                | {
                    "RANK": str(r),
                    "WORLD_SIZE": str(ranks),
                    "LOCAL_RANK": str(r),
                    "LOCAL_WORLD_SIZE": str(ranks),
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(master),
                }
                for r in range(ranks)
            ]
        self.procs = [
            subprocess.Popen(
                cmd,
                env=e,
                stdout=subprocess.DEVNULL,
                stderr=self.stderr,
                cwd=self.storage.parent,
                start_new_session=True,
            )
            for cmd, e in zip(cmds, envs)
        ]
        self.client = httpx.Client(
            base_url=self.url, timeout=60, headers={"Authorization": f"Bearer {key}"} if key else {}
        )

    def text(self) -> str:
        return self.log.read_text()

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def fail(self, what: str):
        raise ServerFailed(f"{what}\n--- server log ---\n{self.text()[-6000:]}")

    def wait_ready(self, timeout: float = 400):
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
        if answer.status_code != 200:
            self.fail(f"POST /v1/videos {fields}: {answer.status_code} {answer.text}")
        return answer.json()

    def video(self, video_id: str) -> dict:
        answer = self.client.get(f"/v1/videos/{video_id}")
        if answer.status_code != 200:
            self.fail(f"GET /v1/videos/{video_id}: {answer.status_code} {answer.text}")
        return answer.json()

    def wait_for(self, video_id: str, *statuses, timeout: float = 400, every: float = 0.1, seen=None) -> dict:
        """The job once its status is one of `statuses`; `seen` (a list) collects every
        (status, progress, step) read."""
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

    def wait_log(self, pattern: str, timeout: float = 300):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.text())
            if m:
                return m
            if not self.alive():
                self.fail(f"the server ended before {pattern!r}")
            time.sleep(0.2)
        self.fail(f"{pattern!r} never showed")

    def ranks(self) -> list[int]:
        """The pids of the processes that run the model (under torchrun: the agent's workers)."""
        pids = []
        for p in self.procs:
            pids += [k for k in children(p.pid) if _runs(k, b"parallel_wan.serve")] or [p.pid]
        return pids

    def http_pid(self) -> int:
        """The pid of rank 0's HTTP process."""
        return next(k for k in children(self.ranks()[0]) if _runs(k, b"parallel_wan.serve.http_process"))

    def signal(self, signum=signal.SIGTERM, rank: int | None = 0) -> None:
        """`signum` to one of the started processes (None: every one)."""
        for i, p in enumerate(self.procs):
            if rank is None or i == rank:
                p.send_signal(signum)

    def wait_exit(self, timeout: float = 180) -> list[int]:
        try:
            return [p.wait(timeout=timeout) for p in self.procs]
        finally:
            self.stop()

    def stop(self) -> None:
        """SIGKILL whatever still runs: the started processes' groups, and torchrun's workers, which
        its agent starts in sessions of their own (killing the agent alone leaves them running)."""
        workers = [pid for pid in self.ranks() if pid not in {p.pid for p in self.procs}]
        for pid in [p.pid for p in self.procs] + workers:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            p.wait(timeout=30)
        self.client.close()
        self.stderr.close()


def children(pid: int) -> list[int]:
    kids = []
    for listing in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            kids += [int(c) for c in listing.read_text().split()]
        except OSError:  # the process ended meanwhile
            pass
    return kids


def _runs(pid: int, module: bytes) -> bool:
    """Whether `pid` runs `python -m MODULE`."""
    try:
        return module in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise ServerFailed(f"no VmRSS for pid {pid}")
