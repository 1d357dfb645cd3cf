"""Stopping for preemption: SIGTERM or SIGUSR1 (SLURM `--signal`, a preempting job, Kubernetes
pod termination, torchrun forwarding its agent's signal) asks the job to stop at the next step
boundary. The handler only sets a flag; the denoise loop asks after every step whether *any*
rank saw a signal (backend.any_rank: one small CPU collective), so every rank stops after the
same step, saves its loop state and exits with PREEMPTED_EXIT.

Exit code 75 (EX_TEMPFAIL, "try again later"): the job is unfinished and resumable; running
the same command again resumes it. A launcher that cannot see the exit code (torchrun's agent
exits 1 after forwarding a SIGTERM) finds the file named by $PARALLEL_WAN_PREEMPTED_FILE instead.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from ..report.outputs import write_json

PREEMPTED_EXIT = 75
SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
MARKER_ENV = "PARALLEL_WAN_PREEMPTED_FILE"


class Preempted(Exception):
    """The job stopped for a signal; `message` says where it stopped and how to resume."""


class PreemptionFlag:
    """Set by the first SIGTERM/SIGUSR1 (later ones change nothing)."""

    def __init__(self):
        self.signum: int | None = None
        self.at: float | None = None
        self._previous = {}

    def install(self) -> PreemptionFlag:
        if threading.current_thread() is threading.main_thread():  # signal handlers live on the main thread
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def uninstall(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def _handle(self, signum, frame) -> None:
        if self.signum is None:
            self.signum, self.at = signum, time.time()

    @property
    def raised(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else "no signal"


def write_marker(record: dict, env=os.environ) -> str | None:
    """Create $PARALLEL_WAN_PREEMPTED_FILE (when set) with `record`; returns its path."""
    path = env.get(MARKER_ENV)
    if not path:
        return None
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_json(path, record, indent=None)
    return path
