"""`parallel-wan --nproc N`: N processes of parallel_wan.run on this machine, started as
`torchrun --standalone --nproc-per-node N -m parallel_wan.run …` starts them — torchrun's own
agent (torch.distributed.run), run in this process — but ending as one process of ours would.

Torchrun alone exits 1 after any failure or signal, whatever its ranks returned, and prints its
ChildFailedError traceback. A user's script and SLURM's requeue logic read the rank's code
instead (2 a bad setting, 75 preempted, 130 Ctrl-C). So here:
- the ranks inherit this process's stdout and stderr: their output streams as it always did;
- each rank that stops with a code of ours records it with its one line
  (launch/rank_exit.py); the earliest record's line is printed once and its code is ours;
- a rank killed by a signal records nothing: it is named (`rank 1/2 was killed by SIGKILL`),
  and when it was the first to fail, 128 + the signal is the code (the shell's convention);
- SIGTERM and SIGINT to this process reach the ranks through the agent, as under torchrun
  (on SIGTERM they save and exit 75), and so does SIGUSR1 (SLURM's `--signal`), which torchrun
  does not forward unless asked;
- the agent's notices that this report replaces (closing signals, the failed exit status, the
  death signal it got) and its traceback are not printed.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import tempfile

from . import rank_exit

# What the agent logs about a failure or a signal that the report here says once, in our words.
AGENT_NOTICES = ("Sending process %s closing signal", "failed (exitcode: %s)", "Received %s death signal")
AGENT_LOGGERS = ("torch.distributed.elastic.multiprocessing.api", "torch.distributed.elastic.agent.server.api")
# The signals the agent itself sends the ranks (closing them, passing on Ctrl-C): a rank that
# died of one was stopped, it did not fail.
AGENT_SIGNALS = (signal.SIGTERM, signal.SIGINT)
KILLED_AFTER = 10.0  # seconds; see verdict()
# The signals the agent passes on to the ranks: torchrun's own, and SIGUSR1 (a preemption too).
FORWARDED = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
# How long the agent waits for the ranks after passing a signal on before it SIGKILLs them
# (torchrun's default is 30 s): a preempted rank first finishes its denoising step — a minute on
# one GPU at 720p — and saves its state; killed before that, the step's state is lost.
# TORCH_ELASTIC_SHUTDOWN_TIMEOUT, when set, wins.
SHUTDOWN_S = 300


class _WithoutAgentNotices(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(AGENT_NOTICES)


def run_ranks(nproc: int, settings: list[str]) -> int:
    """Start `nproc` ranks of parallel_wan.run with `settings`, wait for them, print the report
    and return the exit code."""
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    quiet = _WithoutAgentNotices()
    for name in AGENT_LOGGERS:
        logging.getLogger(name).addFilter(quiet)
    args = torchrun.parse_args(
        [
            "--standalone",
            "--nproc-per-node",
            str(nproc),
            "--signals-to-handle",
            FORWARDED,
            "-m",
            "parallel_wan.run",
            *settings,
        ]
    )
    failures, signum = [], None
    with tempfile.TemporaryDirectory(prefix="parallel_wan_ranks_") as folder:
        os.environ[rank_exit.ENV] = folder  # the agent starts the ranks with this process's environment
        os.environ.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(SHUTDOWN_S))
        try:
            torchrun.run(args)
        except ChildFailedError as exc:
            # (global rank, exit status or -signal, when the agent saw it), first seen first
            failures = [
                (rank, f.exitcode, f.timestamp)
                for rank, f in sorted(exc.failures.items(), key=lambda rf: rf[1].timestamp)
            ]
        except SignalException as exc:
            signum = int(exc.sigval)
        records = rank_exit.read(folder)
    lines, code = verdict(records, failures, nproc, signum)
    for line in lines:
        print(line, file=sys.stderr, flush=True)
    return code


def verdict(
    records: list[dict], failures: list[tuple[int, int, float]], world: int, signum: int | None
) -> tuple[list[str], int]:
    """(the lines to print, the exit code) from the ranks' records (earliest first), the agent's
    failures ((rank, status, when seen), first seen first; status -N: killed by signal N) and the
    signal this process got (None if none).

    The exit code is the first failure's. A rank killed by a signal the job did not send (the
    OOM killer's SIGKILL, a segfault) is first unless a record is older by KILLED_AFTER seconds:
    its peers fail (and record) within moments of losing it, while a rank the agent kills
    after its shutdown timeout (30 s) does so long after the record of the failure that began
    the shutdown. The agent sees a death up to a polling interval late and in whole seconds."""
    killed = [(rank, -status, seen) for rank, status, seen in failures if status < 0 and -status not in AGENT_SIGNALS]
    lines = [f"parallel_wan: rank {rank}/{world} was killed by {signal.Signals(sig).name}" for rank, sig, _ in killed]
    if records and not (killed and killed[0][2] < records[0]["time"] + KILLED_AFTER):
        return lines + [records[0]["line"]], records[0]["code"]
    if killed:
        return lines + [r["line"] for r in records[:1]], 128 + killed[0][1]
    if signum is not None:  # the ranks died of it: still starting, or killed before they could save
        return [
            f"parallel_wan: stopped by {signal.Signals(signum).name} before any rank could stop cleanly; "
            "nothing was saved"
        ], 128 + signum
    if failures:  # a rank ended without a record of ours: its own traceback is above
        status = next((s for _, s, _ in failures if s > 0), failures[0][1])
        return [], status if status > 0 else 128 - status
    return [], 0
