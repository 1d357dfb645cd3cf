"""`run_on_ranks(fn, world_size, *args)`: `fn(rank, world_size, *args)` on N spawned CPU
processes joined by gloo, one thread each, results in rank order; any rank's failure, crash or
timeout fails the test with every rank's report (processes/gloo_ranks.py, shared with the
benchmarks); `generate_on_rank` is a rank's part of a generation; `launch_rank` starts a rank
of the CLI as torchrun would (environment variables, no agent); `rank_zero_code` waits for rank
0 once a peer is dead."""

import os
import subprocess
import sys

from harness.paths import REPO
from processes.gloo_ranks import RankPool

# Each world size's rank processes are spawned (and import torch and parallel_wan) once, then
# serve every test of the module that asks for that many ranks; a failed call discards them
# (processes/gloo_ranks.py RankPool); conftest.py closes the pool after each module.
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


def launch_rank(rank, world, port, out, extra, env=None, log=None, prelude=None):
    """Rank `rank` of `python -m parallel_wan.run` as torchrun starts it; `env`: variables added
    (a test's hold: harness/hold.py); `log`: a file for its stderr (else a pipe); `prelude`: Python
    this rank runs before the CLI (a test's patch of what it does)."""
    env = {
        **os.environ,
        "PYTHONPATH": REPO,
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(rank),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": "1",
        **(env or {}),
    }
    entry = ["-m", "parallel_wan.run"]
    if prelude:
        entry = [
            "-c",
            prelude + "\nimport runpy\nrunpy.run_module('parallel_wan.run', run_name='__main__', alter_sys=True)",
        ]
    cmd = [sys.executable, *entry, f"output_dir={out}", "mesh=cp2", *extra]
    stderr = subprocess.PIPE if log is None else open(log, "w")
    try:
        return subprocess.Popen(cmd, env=env, stderr=stderr, stdout=subprocess.DEVNULL, text=True)
    finally:
        if log is not None:
            stderr.close()  # the rank holds its own copy


# A rank waits for a dead peer up to dist_timeout_s; the tests that kill a rank give the ranks
# PEER_TIMEOUT_S and wait for rank 0 NOTICED_S at most: a rank 0 that ended within that noticed
# the death itself (a connection closed); it was not ended by the timeout.
PEER_TIMEOUT_S = 900
NOTICED_S = 240


def rank_zero_code(ranks) -> int:
    """Rank 0's exit code, once a peer of it is dead: it must end within NOTICED_S, well inside
    PEER_TIMEOUT_S (subprocess.TimeoutExpired otherwise)."""
    return ranks[0].wait(timeout=NOTICED_S)
