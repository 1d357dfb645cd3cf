"""Run one function on N CPU processes joined by gloo, and collect what each returns — for the
benchmarks and, through tests/distributed.py, the tests.

`spawn_ranks(fn, world_size, *args)` calls `fn(rank, world_size, *args)` in N spawned processes
(a fork after torch has started its OpenMP threads can deadlock the child) and returns the
results in rank order. Any rank's exception, crash (a signal, os._exit) or a run past
`timeout_s` fails the call with every rank's report, and the remaining processes are killed —
a rank stuck in a collective waiting for a dead peer never hangs the caller.

`fn` must be importable by name (a module-level function) and should return plain values
(numbers, lists, numpy arrays): tensors would travel through shared memory that dies with the
child.
"""

from __future__ import annotations

import datetime
import os
import queue as queue_lib
import shutil
import tempfile
import time
import traceback

import torch.multiprocessing as mp


class RanksFailed(AssertionError):
    """Some rank failed; the message holds every rank's report. An AssertionError so pytest
    shows it as a test failure."""


def spawn_ranks(fn, world_size: int, *args, threads_per_rank: int = 1, timeout_s: float = 600.0) -> list:
    ctx = mp.get_context("spawn")
    workdir = tempfile.mkdtemp(prefix="gloo_ranks_")
    reports = ctx.Queue()
    procs = [
        ctx.Process(target=_rank_main, daemon=True, name=f"rank{rank}",
                    args=(fn, rank, world_size, os.path.join(workdir, "store"), threads_per_rank, timeout_s,
                          reports, args))
        for rank in range(world_size)
    ]
    results: dict[int, object] = {}
    errors: dict[int, str] = {}
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout_s
        while len(results) < world_size and not errors:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = [r for r in range(world_size) if r not in results]
                errors.update({r: f"no result within {timeout_s:.0f} s (hung or too slow)" for r in missing})
                break
            try:
                rank, ok, payload = reports.get(timeout=min(left, 0.2))
            except queue_lib.Empty:
                _note_dead(procs, results, errors)  # a rank killed by a signal never reports
                continue
            (results if ok else errors)[rank] = payload
        if errors:
            _collect_late_failures(procs, reports, results, errors)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join(timeout=5)
        reports.close()
        shutil.rmtree(workdir, ignore_errors=True)
    if errors:
        text = "\n".join(f"--- rank {r}:\n{errors[r]}" for r in sorted(errors))
        raise RanksFailed(f"{len(errors)} of {world_size} ranks failed running {fn.__name__}:\n{text}")
    return [results[r] for r in range(world_size)]


def _note_dead(procs, results, errors) -> None:
    for rank, p in enumerate(procs):
        if p.exitcode not in (None, 0) and rank not in results and rank not in errors:
            errors[rank] = f"process died with exit code {p.exitcode}"


def _collect_late_failures(procs, reports, results, errors, grace_s: float = 1.0) -> None:
    """The first failure seen is often a symptom (a peer's "connection reset"); give the other
    ranks a moment to report the cause, or to show the exit code they died with."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            rank, ok, payload = reports.get(timeout=0.1)
            (results if ok else errors)[rank] = payload
        except queue_lib.Empty:
            pass
    _note_dead(procs, results, errors)


def _rank_main(fn, rank, world_size, store_path, threads, timeout_s, reports, args):
    import torch
    import torch.distributed as dist

    # Ranks share this machine's cores: the caller decides how many threads each may use, so
    # N processes do not oversubscribe the cores N-fold.
    torch.set_num_threads(threads)
    try:
        if world_size > 1:
            dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=world_size,
                                    timeout=datetime.timedelta(seconds=timeout_s))
        reports.put((rank, True, fn(rank, world_size, *args)))
    except BaseException:
        reports.put((rank, False, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
