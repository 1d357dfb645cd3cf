"""Run one function on N CPU processes joined by gloo, and collect what each returns — for the
benchmarks and, through tests/harness/ranks.py, the tests.

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

# A pool rank's report that its gloo group could not form (the caller's function never ran there).
RENDEZVOUS_FAILED = "rendezvous failed (init_process_group): "
# How long a rank waits for its peers to form the gloo group. A rendezvous that hangs (gloo's
# full mesh of connections never completing: seen once in a fresh-clone suite run, both ranks
# silent until the call's 300 s were up) then fails as a rendezvous, which RankPool.run retries
# on new processes, instead of using up the call's whole time; the group's collectives keep
# the call's timeout. 120 s: a peer still importing torch on a loaded 2-core machine arrives
# well within it.
RENDEZVOUS_S = 120.0


class RanksFailed(AssertionError):
    """Some rank failed; the message holds every rank's report. An AssertionError so pytest
    shows it as a test failure."""


def spawn_ranks(fn, world_size: int, *args, threads_per_rank: int = 1, timeout_s: float = 600.0) -> list:
    ctx = mp.get_context("spawn")
    workdir = tempfile.mkdtemp(prefix="gloo_ranks_")
    reports = ctx.Queue()
    procs = [
        ctx.Process(
            target=_rank_main,
            daemon=True,
            name=f"rank{rank}",
            args=(fn, rank, world_size, os.path.join(workdir, "store"), threads_per_rank, timeout_s, reports, args),
        )
        for rank in range(world_size)
    ]
    try:
        for p in procs:
            p.start()
        results, errors = _await_reports(procs, reports, world_size, timeout_s)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join(timeout=5)
        reports.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return _in_rank_order(fn, world_size, results, errors)


def _await_reports(procs, reports, world_size: int, timeout_s: float) -> tuple[dict, dict]:
    """Each rank's (ok, value) from `reports` (`.get(timeout)` → (rank, ok, value)) until every
    rank reported, one failed, one died or the time is up: (results, errors) by rank."""
    results: dict[int, object] = {}
    errors: dict[int, str] = {}
    deadline = time.monotonic() + timeout_s
    while len(results) < world_size and not errors:
        left = deadline - time.monotonic()
        if left <= 0:
            missing = [r for r in range(world_size) if r not in results]
            errors.update({r: f"no result within {timeout_s:.0f} s (hung or too slow)" for r in missing})
            break
        try:
            rank, ok, value = reports.get(timeout=min(left, 0.2))
        except queue_lib.Empty:
            _note_dead(procs, results, errors)  # a rank killed by a signal never reports
            continue
        (results if ok else errors)[rank] = value
    if errors:
        _collect_late_failures(procs, reports, results, errors)
    return results, errors


def _in_rank_order(fn, world_size: int, results: dict, errors: dict) -> list:
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
            _join_gloo(rank, world_size, store_path, timeout_s)
        reports.put((rank, True, fn(rank, world_size, *args)))
    except BaseException:
        reports.put((rank, False, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _join_gloo(rank: int, world_size: int, store_path: str, timeout_s: float) -> None:
    """Join the call's gloo group (a file store): the rendezvous within RENDEZVOUS_S, the
    collectives within `timeout_s` (the group's timeout, set again once it has formed)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    dist.init_process_group(
        "gloo",
        init_method=f"file://{store_path}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=min(timeout_s, RENDEZVOUS_S)),
    )
    if timeout_s > RENDEZVOUS_S:
        distributed_c10d._set_pg_timeout(datetime.timedelta(seconds=timeout_s))


# A pool's ranks fork from multiprocessing's fork server, which imported these once (one server
# per calling process): a rank starts in a fraction of a second instead of importing torch, the
# pipeline, Hydra (every rank composes its settings: 0.4 s) and torch._dynamo (2.3 s, imported on
# first use by FSDP2's memory=sharded and by tensor ops under a dispatch mode) again — ≈3-6 s of
# CPU per rank on the 2-core machine, the suite's largest start-up cost. The server only imports
# (and starts no thread doing so) — no tensor op runs there, so no OpenMP thread exists to be
# lost in the fork (the hazard `spawn_ranks`' docstring names). diffusers is left out: importing
# its models starts a thread.
PRELOAD = (
    "torch",
    "torch.distributed",
    "torch._dynamo",
    "hydra",
    "hydra.compose",
    "omegaconf",
    "parallel_wan.config.compose",
    "parallel_wan.pipeline",
    "parallel_wan.backends.torch.backend",
)


def _forkserver():
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))  # read when the server starts; later calls change nothing
    return ctx


class RankPool:
    """`spawn_ranks` with the processes kept: `pool.run(fn, world_size, *args)` calls `fn(rank,
    world_size, *args)` on `world_size` ranks that stay alive between calls, so a suite of tests
    pays for spawning a process and importing torch once per rank, not once per test.

    Each call gets a fresh gloo group (a new file store), torch's thread count set again, and the
    caller's sys.path (a test module's folder) and environment; results come back in rank order.
    The processes fork from a server that preloaded torch (`PRELOAD`); `preload=False` spawns
    fresh interpreters instead, for callers that must set the environment before those imports
    (TRITON_INTERPRET=1 is read when Triton is imported, and transformers imports Triton). A
    failure, a crash or a timeout fails the call as `spawn_ranks` does and discards that world
    size's processes: the next call starts new ones, so nothing a failed call left behind is reused.
    A call whose only failures are the pool's own rendezvous (`init_process_group`, before the
    function ran on those ranks) runs once more on new processes, saying so on stderr.
    """

    def __init__(self, threads_per_rank: int = 1, max_processes: int = 9, preload: bool = True):
        self.threads = threads_per_rank
        self.preload = preload
        # At most this many kept processes (each holds torch and a model's worth of memory): a
        # new world size first stops the least recently used ones. 9 = one 1-rank reference
        # beside an 8-rank mesh.
        self.max_processes = max_processes
        self._ranks: dict[int, tuple] = {}  # world size → (processes, task queues, reports queue), LRU order
        self._calls = 0

    def run(self, fn, world_size: int, *args, timeout_s: float = 600.0) -> list:
        import pickle
        import sys

        payload = pickle.dumps((fn, args))
        for attempt in (1, 2):
            procs, tasks, reports = self._ranks.pop(world_size, None) or self._start(world_size)
            self._ranks[world_size] = (procs, tasks, reports)  # most recently used last
            self._calls += 1
            call = self._calls
            workdir = tempfile.mkdtemp(prefix="gloo_pool_")
            for rank in range(world_size):
                tasks[rank].put(
                    (call, payload, list(sys.path), dict(os.environ), os.path.join(workdir, "store"), timeout_s)
                )
            try:
                results, errors = _await_reports(procs, _ThisCall(reports, call), world_size, timeout_s)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
            if not errors:
                break
            self._discard(world_size)
            if attempt == 1 and all(e.startswith(RENDEZVOUS_FAILED) for e in errors.values()):
                # The pool's own gloo rendezvous failed (seen once in ~15 suite runs: "connectFullMesh
                # failed … Connection closed by peer"), before the caller's function ran on that
                # rank: new processes, the whole call once more, and a line saying so.
                print(
                    f"gloo_ranks: the {world_size}-rank pool's rendezvous failed on rank(s) {sorted(errors)}; "
                    f"running {fn.__name__} again on new processes:\n{next(iter(errors.values()))[-600:]}",
                    file=sys.stderr,
                    flush=True,
                )
                continue
            break
        return _in_rank_order(fn, world_size, results, errors)

    def _start(self, world_size: int):
        while self._ranks and sum(len(procs) for procs, _, _ in self._ranks.values()) + world_size > self.max_processes:
            self._stop(next(iter(self._ranks)))
        ctx = _forkserver() if self.preload else mp.get_context("spawn")
        tasks = [ctx.Queue() for _ in range(world_size)]
        reports = ctx.Queue()
        procs = [
            ctx.Process(
                target=_pool_rank_main,
                daemon=True,
                name=f"pool{world_size}-rank{rank}",
                args=(rank, world_size, self.threads, tasks[rank], reports),
            )
            for rank in range(world_size)
        ]
        for p in procs:
            p.start()
        return procs, tasks, reports

    def _discard(self, world_size: int) -> None:
        procs, tasks, reports = self._ranks.pop(world_size, (None, None, None))
        for p in procs or ():
            if p.is_alive():
                p.kill()
            p.join(timeout=5)

    def _stop(self, world_size: int) -> None:
        """Ask a world size's processes to exit, then make sure they did."""
        procs, tasks, _ = self._ranks[world_size]
        for q in tasks:
            q.put(None)
        for p in procs:
            p.join(timeout=5)
        self._discard(world_size)

    def close(self) -> None:
        for world_size in list(self._ranks):
            self._stop(world_size)


class _ThisCall:
    """A reports queue seen through one call's reports (late failures of that call only)."""

    def __init__(self, reports, call):
        self.reports, self.call = reports, call

    def get(self, timeout):
        got_call, rank, ok, value = self.reports.get(timeout=timeout)
        if got_call != self.call:
            raise queue_lib.Empty
        return rank, ok, value


def _pool_rank_main(rank, world_size, threads, tasks, reports):
    import pickle
    import sys

    import torch
    import torch.distributed as dist

    while True:
        item = tasks.get()
        if item is None:
            return
        call, payload, path, environ, store_path, timeout_s = item
        sys.path[:0] = [p for p in path if p not in sys.path]  # the caller's test folder, first
        if environ != os.environ:  # the caller's now, not the fork server's when it started
            os.environ.clear()
            os.environ.update(environ)
        torch.set_num_threads(threads)
        try:
            fn, args = pickle.loads(payload)
            if world_size > 1:
                try:
                    _join_gloo(rank, world_size, store_path, timeout_s)
                except Exception:
                    reports.put((call, rank, False, RENDEZVOUS_FAILED + traceback.format_exc()))
                    continue  # `finally` below still runs
            reports.put((call, rank, True, fn(rank, world_size, *args)))
        except BaseException:
            reports.put((call, rank, False, traceback.format_exc()))
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
