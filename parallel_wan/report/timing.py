"""Per-phase wall-clock timings and the TIMING SUMMARY printed at the end of a run."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager


class PhaseTimer:
    """Accumulates seconds per named phase. `sync` is called before each clock read so
    asynchronous device work (CUDA) is charged to the phase that queued it."""

    def __init__(self, sync: Callable[[], None] | None = None):
        self.seconds: dict[str, float] = {}
        self._sync = sync or (lambda: None)
        self._start = time.perf_counter()

    @contextmanager
    def phase(self, name: str):
        self._sync()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._sync()
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def total(self) -> float:
        return time.perf_counter() - self._start

    def as_dict(self) -> dict[str, float]:
        return {**{k: round(v, 4) for k, v in self.seconds.items()}, "total": round(self.total(), 4)}

    def summary(self, extra: dict[str, str] | None = None) -> str:
        return timing_summary(self.seconds, self.total(), extra)


def timing_summary(seconds: dict[str, float], total: float, extra: dict[str, str] | None = None) -> str:
    width = 50
    lines = ["=" * width, "  TIMING SUMMARY", "=" * width]
    for name, sec in seconds.items():
        lines.append(f"  {name + ':':<22}{sec:>10.2f} s")
    lines.append("  " + "-" * (width - 4))
    lines.append(f"  {'total:':<22}{total:>10.2f} s")
    for k, v in (extra or {}).items():
        lines.append(f"  {k}: {v}")
    lines.append("=" * width)
    return "\n".join(lines)
