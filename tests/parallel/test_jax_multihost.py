"""JAX across hosts, on this CPU: two processes join one runtime through `jax.distributed`
(the JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID variables a launcher sets),
each driving two of the mesh's four devices, with JAX's CPU collectives (gloo) between them.

The video must be the one-host video of the same mesh bit for bit — the devices compute the
same programs, only the wires between them change — and the backend's leader/`same_on_every_rank`
must agree across the processes (the server relies on both: backends/contract.py)."""

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest
from harness import one_host
from harness.xla_flags import host_flags

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _hosts(args: list[str], devices_each: int = 2, timeout: float = 600) -> list[subprocess.CompletedProcess]:
    """`python ARGS` as two JAX processes of one job; both must finish."""
    port = _free_port()
    procs = []
    for pid in range(2):
        env = os.environ | {
            "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
            "JAX_NUM_PROCESSES": "2",
            "JAX_PROCESS_ID": str(pid),
            "XLA_FLAGS": host_flags(devices_each),
            "OMP_NUM_THREADS": "1",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    out = []
    try:
        for p in procs:
            stdout, _ = p.communicate(timeout=timeout)
            out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout))
    finally:
        for p in procs:
            p.kill()
    return out


def test_two_hosts_render_the_one_host_video(tmp_path, tmp_path_factory):
    # the one-host video is the session's (harness/one_host.py: the server test compares with it too)
    run = ["-m", "parallel_wan.run", *one_host.RUN, f"prompt='{one_host.PROMPT}'", f"seed={one_host.SEED}"]
    two = _hosts([*run, f"output_dir={tmp_path / 'two'}"])
    for r, done in enumerate(two):
        assert done.returncode == 0, f"process {r}:\n{done.stdout[-3000:]}"
    assert one_host.frames_sha(tmp_path / "two") == one_host.frames_sha(one_host.one_host_video(tmp_path_factory))
    # only process 0 writes: one video, one sidecar, and the other host's log stays quiet
    assert sorted(p.name for p in (tmp_path / "two").iterdir() if p.suffix in (".mp4", ".json")) == [
        "video.json",
        "video.mp4",
    ]


PROBE = textwrap.dedent(
    """
    import json
    from parallel_wan.backends.jax.multihost import start
    start()
    from parallel_wan.backends.jax.backend import JaxBackend
    from parallel_wan.parallel.mesh import MeshSpec
    b = JaxBackend(MeshSpec(name="cp4", cp=4, ulysses=4))
    mine = {"job": "video_%d" % b.rank, "settings": {"steps": 3 + b.rank}}
    got = b.same_on_every_rank(mine)
    vote = b.any_rank(b.rank == 1)
    print("RESULT", json.dumps({"rank": b.rank, "leader": b.leader, "got": got, "vote": vote,
                                "places_concurrently": b.places_concurrently}))
    """
)


def test_the_leader_and_its_value_are_one_across_hosts():
    results = []
    for r, done in enumerate(_hosts(["-c", PROBE], timeout=300)):
        assert done.returncode == 0, f"process {r}:\n{done.stdout[-3000:]}"
        line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
        results.append(json.loads(line[len("RESULT ") :]))
    assert [r["leader"] for r in results] == [True, False]
    # every host receives process 0's value, not its own
    assert [r["got"] for r in results] == [{"job": "video_0", "settings": {"steps": 3}}] * 2
    assert [r["vote"] for r in results] == [True, True]
    assert [r["places_concurrently"] for r in results] == [False, False]
