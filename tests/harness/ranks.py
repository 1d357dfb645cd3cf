"""`run_on_ranks(fn, world_size, *args)`: `fn(rank, world_size, *args)` on N spawned CPU
processes joined by gloo, one thread each, results in rank order; any rank's failure, crash or
timeout fails the test with every rank's report (benchmarks/gloo_ranks.py, shared with the
benchmarks); `generate_on_rank` is a rank's part of a generation; `launch_rank` starts a rank
of the CLI as torchrun would (environment variables, no agent); `kill_rank_one_when` kills one
mid-run."""

import os
import signal
import subprocess
import sys
import time

from benchmarks.gloo_ranks import RankPool
from harness.paths import REPO

# Each world size's rank processes are spawned (and import torch and parallel_wan) once, then
# serve every test of the module that asks for that many ranks; a failed call discards them
# (benchmarks/gloo_ranks.py RankPool); conftest.py closes the pool after each module.
POOL = RankPool(threads_per_rank=1)
# Ranks spawned without the fork server's preloaded modules: for a module whose ranks set the
# environment before torch's and transformers' imports (TRITON_INTERPRET=1: Triton reads it
# when it is imported, and transformers imports Triton).
SPAWNED_POOL = RankPool(threads_per_rank=1, preload=False)


def run_on_ranks(fn, world_size: int, *args, timeout_s: float = 120.0, preloaded: bool = True) -> list:
    return (POOL if preloaded else SPAWNED_POOL).run(fn, world_size, *args, timeout_s=timeout_s)


def free_port() -> int:
    """A TCP port nobody listens on now (a rendezvous, a coordinator)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def generate_on_rank(rank, world_size, overrides):
    """One rank's part of a generation; rank 0 returns its latents and frames."""
    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.config.compose import compose_spec
    from parallel_wan.launch import Launch
    from parallel_wan.pipeline import generate, preflight

    spec = compose_spec(list(overrides), world_size, output_dir="/tmp/unused")
    ckpt = preflight(spec)
    backend = start_torch_backend(spec.execution.device, spec.mesh, Launch(rank, world_size, rank, "test"))
    gen = generate(spec, backend, ckpt)
    if rank != 0:
        assert gen.frames is None
        return None
    return gen.latents, gen.frames, gen.info["mesh"]


def launch_rank(rank, world, port, out, extra):
    env = {
        **os.environ,
        "PYTHONPATH": REPO,
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(rank),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": "1",
    }
    cmd = [sys.executable, "-m", "parallel_wan.run", f"output_dir={out}", "mesh=cp2", *extra]
    return subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)


def kill_rank_one_when(event, ranks, seen, never: str, pause: float = 0.0):
    """SIGKILL rank 1 once `event` is set (within 240 s); (rank 0's exit code, seconds it took
    to exit). Every rank still alive afterwards is killed."""
    try:
        assert event.wait(240), f"{never}:\n" + "".join(seen)[-3000:]
        time.sleep(pause)
        ranks[1].send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        rc = ranks[0].wait(timeout=90)  # well inside dist_timeout_s + teardown
        return rc, time.monotonic() - t0
    finally:
        for p in ranks:
            if p.poll() is None:
                p.kill()
