"""How an entry point ends when it cannot do what it was asked, in one place: a refusal before
anything started (one line, exit 2) and a failure after (exit 1, 75, 130, 2). Under `parallel-wan
--nproc N` a rank leaves its line to the script, which prints the first rank's once
(launch/rank_exit.py)."""

from __future__ import annotations

import os
import sys

from ..errors import RunError
from ..launch.rank_exit import leave


def refusal(exc, program: str = "parallel_wan", speaks: bool = True) -> int:
    """Say why `program` refuses (a ConfigError, or its message) in one line on stderr — on the
    process that `speaks`, once — and return its exit code, 2."""
    line = f"{program}: error: {exc}"
    if not leave(2, line) and speaks:
        print(line, file=sys.stderr)
    return 2


def refuse(exc, speaks: bool = True, program: str = "parallel_wan") -> None:
    """`refusal`, then exit 2. Every process checks the same settings and stops here, before any
    process group exists or anything compiles, so nobody waits on anybody; one process says why."""
    sys.exit(refusal(exc, program, speaks))


def fail(exc: BaseException, rank: int, world: int) -> None:
    """How a started run ends when it cannot finish; nothing is half-written either way (outputs
    are staged and renamed only once all of them are written: report/outputs.py).

    Preempted (SIGTERM/SIGUSR1: jobs/preemption.py): the state is saved; exit 75, every rank.
    Ctrl-C: exit 130 (128 + SIGINT, the shell's code). A RunError (non-finite latents, outputs
    that could not be written): its one line, exit 1; weights holding NaN/inf (BadWeights): its
    one line, exit 2, like any bad input. Anything else on one process: Python's traceback. On several: the
    traceback, each line tagged with the rank, in this rank's log,
    then the one-line reason, and exit at once — a failing rank must end the job, not leave its
    peers blocked in a collective: their collectives then fail (peer gone) or time out after
    dist_timeout_s, and they exit through this same path."""
    import traceback

    if isinstance(exc, SystemExit):
        raise exc
    from ..jobs.preemption import PREEMPTED_EXIT, Preempted

    tag = f" (rank {rank}/{world})" if world > 1 else ""
    if isinstance(exc, Preempted):
        code, line, speaks = PREEMPTED_EXIT, f"parallel_wan: {exc}", rank == 0
    elif isinstance(exc, KeyboardInterrupt):
        code, line, speaks = 130, f"parallel_wan: interrupted{tag}; nothing was written", rank == 0
    elif isinstance(exc, RunError):
        code, line, speaks = exc.exit_code, f"parallel_wan: error{tag}: {exc}", True
    elif world == 1:
        raise exc
    else:
        lines = "".join(traceback.format_exception(exc)).splitlines()
        print("\n".join(f"[rank {rank}/{world}] {line}" for line in lines), file=sys.stderr)
        code, line, speaks = 1, f"parallel_wan: rank {rank}/{world} failed: {type(exc).__name__}: {exc}", True
    # under `parallel-wan --nproc` the script prints the first rank's line (launch/rank_exit.py)
    if not leave(code, line) and speaks:
        print(line, file=sys.stderr, flush=True)
    if world > 1:
        os._exit(code)
    sys.exit(code)
