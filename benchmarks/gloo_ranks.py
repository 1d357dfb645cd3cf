"""Run one function on N CPU processes joined by gloo, and collect what each returns.

`spawn_ranks(fn, world_size, *args)` calls `fn(rank, world_size, *args)` in N spawned processes
(a fork after torch has started its thread pools can deadlock) and returns the results in rank
order. A rank's exception or death fails the whole call with that rank's traceback, and the
other processes are killed, so a benchmark never hangs on a peer stuck in a collective.

`fn` must be a module-level function (spawned processes import it by name) and should return
plain values: tensors would travel through shared memory that dies with the child.
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


def spawn_ranks(fn, world_size: int, *args, threads_per_rank: int = 1, timeout_s: float = 600.0) -> list:
    ctx = mp.get_context("spawn")
    workdir = tempfile.mkdtemp(prefix="bench_gloo_")
    reports = ctx.Queue()
    procs = [
        ctx.Process(target=_rank_main, daemon=True, name=f"rank{rank}",
                    args=(fn, rank, world_size, os.path.join(workdir, "store"), threads_per_rank, timeout_s,
                          reports, args))
        for rank in range(world_size)
    ]
    results, errors = {}, {}
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout_s
        while len(results) < world_size and not errors:
            if time.monotonic() > deadline:
                errors[-1] = f"no result from every rank within {timeout_s:.0f} s"
                break
            try:
                rank, ok, payload = reports.get(timeout=0.2)
            except queue_lib.Empty:
                for rank, p in enumerate(procs):
                    if p.exitcode not in (None, 0) and rank not in results:
                        errors[rank] = f"process died with exit code {p.exitcode}"
                continue
            (results if ok else errors)[rank] = payload
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join(timeout=5)
        reports.close()
        shutil.rmtree(workdir, ignore_errors=True)
    if errors:
        text = "\n".join(f"--- rank {r}:\n{e}" for r, e in sorted(errors.items()))
        raise RuntimeError(f"{fn.__name__} failed on {world_size} gloo ranks:\n{text}")
    return [results[r] for r in range(world_size)]


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
