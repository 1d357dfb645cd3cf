"""`run_on_ranks(fn, world_size, *args)`: `fn(rank, world_size, *args)` on N spawned CPU
processes joined by gloo, one thread each, results in rank order; any rank's failure, crash or
timeout fails the test with every rank's report (benchmarks/gloo_ranks.py, shared with the
benchmarks)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/ is not installed

from benchmarks.gloo_ranks import spawn_ranks  # noqa: E402


def run_on_ranks(fn, world_size: int, *args, timeout_s: float = 120.0) -> list:
    return spawn_ranks(fn, world_size, *args, threads_per_rank=1, timeout_s=timeout_s)
