"""A test's hold on the denoising loops of the processes it starts (the loop's hold point:
parallel_wan/pipeline/denoise.py `HoldPoint`), so that it acts while a job is at a known step
instead of after a guessed amount of work:

    hold = Hold(tmp_path, step=2)           # before step 2 (2 steps done)
    proc = start(..., env=hold.env())       # every process that inherits it holds there
    hold.wait_held(processes=2)             # both ranks' next loop is held at step 2
    ...act: a signal, a DELETE, a kill...
    hold.release()                          # that loop goes on (the next one holds again)

The waits fail the test only when what they wait for never happens (a hang), never because the
machine is slow."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from parallel_wan.pipeline.hold_point import DECODE_HOLD_ENV, HOLD_ENV

EVERY = 10**9  # a release count no test reaches: every loop passes
HANG_S = 300.0  # only a process that hangs or died keeps a wait this long


class Hold:
    def __init__(self, folder, step: int | str, released: int = 0, name: str = "hold"):
        """`released`: the loops let through from the start (the first `released` arrivals pass)."""
        self.step, self.gate = step, Path(folder) / f"{name}-{step}"
        self.log = Path(f"{self.gate}.log")
        self.arrival = released  # the last arrival this test waited for (or let through ahead)
        self._write(released)

    def env(self) -> dict:
        """`step="decode"`: after the last step, before the decode (its own variable, beside a step's hold)."""
        return {DECODE_HOLD_ENV: str(self.gate)} if self.step == "decode" else {HOLD_ENV: f"{self.step}:{self.gate}"}

    def notes(self) -> list[tuple[int, str, str]]:
        """(pid, 'held' or 'signal', the arrival or the signal's name) for each line of the log."""
        if not self.log.exists():
            return []
        return [
            (int(pid), kind, what) for pid, kind, what in (line.split() for line in self.log.read_text().splitlines())
        ]

    def wait_held(
        self, processes: int = 1, arrival: int | None = None, alive: Callable[[], bool] = lambda: True, context=str
    ) -> int:
        """Until `processes` processes hold their loop at arrival `arrival` (default: the next
        one); returns the arrival. `alive()` False or a hang fails the test with `context()`."""
        n = self.arrival + 1 if arrival is None else arrival
        self._until(
            lambda: len({pid for pid, kind, what in self.notes() if kind == "held" and int(what) == n}) >= processes,
            f"{processes} process(es) held at arrival {n} of step {self.step}",
            alive,
            context,
        )
        self.arrival = n
        return n

    def wait_signal(self, name: str, processes: int = 1, alive: Callable[[], bool] = lambda: True, context=str):
        """Until `processes` held processes noted signal `name` (its handler has run)."""
        self._until(
            lambda: len({pid for pid, kind, what in self.notes() if kind == "signal" and what == name}) >= processes,
            f"{processes} held process(es) noting {name}",
            alive,
            context,
        )

    def hold_next(self) -> None:
        """A gate opened for every loop (`released=EVERY`) closed for the next arrival only:
        wait_held() then waits for it, and release_all() opens the gate again. The loops that came
        before are counted from the log (every arrival is noted, passed or held)."""
        self.arrival = max((int(what) for _, kind, what in self.notes() if kind == "held"), default=0)
        self._write(self.arrival)

    def release(self, arrivals: int | None = None) -> None:
        """Let the loops through up to arrival `arrivals` (default: the last one waited for)."""
        self._write(self.arrival if arrivals is None else arrivals)

    def release_all(self) -> None:
        self._write(EVERY)

    def _write(self, count: int) -> None:
        tmp = self.gate.with_name(self.gate.name + ".tmp")
        tmp.write_text(str(count))
        os.replace(tmp, self.gate)  # a loop reads the whole number or the previous one

    def _until(self, done, what: str, alive, context) -> None:
        start = last_alive = time.monotonic()
        while not done():
            now = time.monotonic()
            if now - last_alive > 0.5:  # alive() may cost a process (scontrol): twice a second
                if not alive():
                    pytest.fail(f"the process ended before {what}; hold log: {self.notes()}\n{context()}"[-6000:])
                last_alive = now
            if now - start > HANG_S:
                pytest.fail(f"no {what} after {HANG_S:.0f} s; hold log: {self.notes()}\n{context()}"[-6000:])
            time.sleep(0.02)
