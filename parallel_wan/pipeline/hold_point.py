"""The denoising loop's hold point, for the tests only (tests/README.md; tests/harness/hold.py
drives it): PARALLEL_WAN_TEST_HOLD=K:GATE keeps each loop before its step K until the test lets
it go; PARALLEL_WAN_TEST_HOLD_DECODE=GATE keeps it after its last step, before the decode.
pipeline/denoise.py asks `hold_point()` and `decode_hold_point()` once per loop; unset, nothing
else happens."""

from __future__ import annotations

import itertools
import os
import select
import signal
import time
from dataclasses import dataclass

HOLD_ENV = "PARALLEL_WAN_TEST_HOLD"
DECODE_HOLD_ENV = "PARALLEL_WAN_TEST_HOLD_DECODE"  # after the last step: a job that is decoding
HOLD_POLL_S = 0.02
HOLD_LIMIT_S = 900.0  # a test that never releases its hold (it failed) does not leave a process behind for ever
_arrivals: dict = {}  # gate → this process's count of the loops that reached its hold point


@dataclass(frozen=True)
class HoldPoint:
    """For the tests only (tests/README.md; tests/harness/hold.py drives it): with
    PARALLEL_WAN_TEST_HOLD=K:GATE set, each denoising loop of this process waits before its step K
    (K steps done) until the test lets it go, so a test acts while a job is known to be running,
    at a known step, instead of after a guessed amount of work.

    The process's n-th loop to arrive at this gate (counted per process: every rank's n-th loop is
    the same job's) appends `PID held n` to GATE.log, then waits until the file GATE holds a number ≥ n.
    While it waits, each signal with a Python handler that reaches the process is noted in GATE.log
    too (`PID signal NAME`), after its handler ran: a test that sends SIGTERM can release the loop
    once the preemption flag is surely set, and the step after the hold then stops the job. Ctrl-C's
    handler raises out of the wait, as out of a step. Unset, the loop pays one environment lookup
    per call and one integer compare per step. The scanned loop (scan_loop) is one program: it
    has no hold point; nor do the planner's loop on meta tensors and the compile rehearsal."""

    step: int
    gate: str

    def wait(self) -> None:
        arrival, log = next(_arrivals.setdefault(self.gate, itertools.count(1))), f"{self.gate}.log"
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_write, False)
        try:
            previous = signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
        except ValueError:  # not the main thread, where handlers run: no signals to note
            previous = None
        try:
            _note(log, f"held {arrival}")
            deadline = time.monotonic() + HOLD_LIMIT_S
            while self._released() < arrival:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{HOLD_ENV}: arrival {arrival} at step {self.step} never released")
                if select.select([wake_read], [], [], HOLD_POLL_S)[0]:
                    for signum in os.read(wake_read, 64):
                        _note(log, f"signal {signal.Signals(signum).name}")  # its handler ran before this call
        finally:
            if previous is not None:
                signal.set_wakeup_fd(previous)
            os.close(wake_read)
            os.close(wake_write)

    def _released(self) -> int:
        try:
            with open(self.gate) as f:
                text = f.read().strip()
        except FileNotFoundError:
            return 0
        return int(text) if text.isdigit() else 0  # a half-written number: not yet


def hold_point() -> HoldPoint | None:
    """The hold point PARALLEL_WAN_TEST_HOLD asks for; None when it is unset (every real run)."""
    value = os.environ.get(HOLD_ENV)
    if not value:
        return None
    step, _, gate = value.partition(":")
    if not step.isdigit() or not gate:
        raise ValueError(f"{HOLD_ENV}={value!r}: expected STEP:GATE_FILE (tests/README.md)")
    return HoldPoint(int(step), gate)


def decode_hold_point() -> HoldPoint | None:
    """The hold after a loop's last step (before the decode) PARALLEL_WAN_TEST_HOLD_DECODE asks
    for (step -1: it is no step); None when it is unset."""
    gate = os.environ.get(DECODE_HOLD_ENV)
    return HoldPoint(-1, gate) if gate else None


def _note(log: str, what: str) -> None:
    with open(log, "a") as f:  # one short append per line: lines of several ranks do not mix
        f.write(f"{os.getpid()} {what}\n")
