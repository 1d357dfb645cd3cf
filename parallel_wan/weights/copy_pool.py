"""The one place weight bytes are copied: a shared thread pool and huge-page host buffers.

Every loader (the experts, the VAE, the text encoder) describes its work as copies — a
destination buffer, a zero-copy view of the mapped file and where it comes from — and hands
them to `copy_all`. Each copy checks what it writes for NaN/inf (weights/finite.py).
torch's copy kernels release the GIL, so the pool's threads copy in parallel; the page
faults of the source mapping overlap with the copying of other tensors, which is what hides
a cold page cache.

The pool is shared on purpose: the two experts load side by side and the text encoder
alongside them, and one pool of `load_threads()` workers keeps the busy threads at about the
core count whoever submits. Callers wait on their own futures and never submit from inside a
pool task, so the pool cannot deadlock.

Its size counts torch's own intra-op threads: a large `copy_` already splits across
`torch.get_num_threads()` OpenMP threads, so the pool adds workers only for cores those leave
idle (cores // intra-op threads; one worker with torch's default of one thread per core, more
under torchrun, which sets OMP_NUM_THREADS=1). Nesting both oversubscribes the cores, and
OpenMP's spin-waiting makes that expensive: on this 2-core machine, under load from other
processes, two workers × two OpenMP threads loaded a 3.3 GB bf16 expert in 4.0 s, one worker in
0.54 s.

Destinations of 2 MiB and more are anonymous private mappings advised MADV_HUGEPAGE. The first
touch of fresh memory is otherwise the slowest part of loading: measured on this 2-core
machine, allocating and filling 1 GiB ran at 1.5 GB/s with 4 KiB pages and 8 GB/s with huge
pages, while copying out of the warm page cache runs at 7.7 GB/s.
"""

from __future__ import annotations

import math
import mmap
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from parallel_wan.weights.finite import copy_checked, refuse

HUGE_PAGE = 2 << 20
# More copy threads than this only queue on memory bandwidth.
MAX_THREADS = 16

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()

# (destination, source view maker, where the bytes come from: (file, tensor name) for the
# message that refuses NaN/inf weights, or None for bytes already checked, e.g. our own cache)
Copy = tuple[torch.Tensor, Callable[[], torch.Tensor], "tuple[str, str] | None"]


def load_threads() -> int:
    """Copy workers: the cores torch's intra-op threads leave (PARALLEL_WAN_LOAD_THREADS overrides)."""
    setting = os.environ.get("PARALLEL_WAN_LOAD_THREADS")
    if setting:
        try:
            value = int(setting)
        except ValueError:
            value = 0
        if value < 1:
            raise ValueError(
                f"PARALLEL_WAN_LOAD_THREADS={setting!r} must be a whole number ≥ 1; unset it to use every core"
            )
        return value
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores // max(1, torch.get_num_threads()), MAX_THREADS))


def copy_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=load_threads(), thread_name_prefix="weights-copy")
        return _pool


def copy_into(destination: torch.Tensor, source: torch.Tensor) -> int:
    """The single copy of a tensor's bytes, with the dtype cast and the finite check fused in
    (weights/finite.py); returns how many values were NaN/inf (tests instrument it)."""
    return copy_checked(destination, source)


def copy_all(copies: Iterable[Copy]) -> None:
    """Run every copy on the shared pool and wait (`run_all`)."""
    run_all(copy_task(*copy) for copy in copies)


def copy_task(destination: torch.Tensor, source: Callable[[], torch.Tensor], origin=None) -> Callable[[], None]:
    """One `Copy` as a task for `run_all`."""
    return lambda: _run(destination, source, origin)


def run_all(tasks: Iterable[Callable[[], None]]) -> None:
    """Run every task (a copy, or a copy that quantizes: weights/quantized/at_load.py) on the shared
    pool and wait; the first failure is raised after the rest have stopped, so no worker still
    writes into buffers the caller is dropping."""
    futures: list[Future] = [copy_pool().submit(task) for task in tasks]
    error = None
    for future in futures:
        try:
            future.result()
        except BaseException as exc:  # keep waiting: the remaining copies must finish first
            error = error or exc
    if error is not None:
        raise error


def _run(destination: torch.Tensor, source: Callable[[], torch.Tensor], origin=None) -> None:
    bad = copy_into(destination, source())
    if bad and origin is not None:
        raise refuse(*origin, bad, destination.numel())


def host_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised CPU tensor; huge-page backed when it is large (see the module docstring).

    The memory belongs to the tensor: it is unmapped when the last view of it is dropped.
    """
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < HUGE_PAGE or not hasattr(mmap, "MADV_HUGEPAGE"):
        return torch.empty(shape, dtype=dtype)
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE)
    region.madvise(mmap.MADV_HUGEPAGE)
    return torch.frombuffer(region, dtype=dtype, count=math.prod(shape)).view(shape)


def shutdown() -> None:
    """Stop the pool's threads after their work (a later load starts a new pool); for
    benchmarks that vary the thread count, and interpreters that want no idle threads."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=True)
