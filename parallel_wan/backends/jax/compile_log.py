"""Which programs XLA compiled, and how long each took, from JAX's monitoring hook. Used to
report compile time and to check that the denoising step compiles once per expert."""

from __future__ import annotations

import threading

import jax

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


class CompileLog:
    """`with CompileLog() as log:` records every backend compilation as (function name,
    seconds) in `log.events`."""

    def __init__(self):
        self.events: list[tuple[str, float]] = []
        self._lock = threading.Lock()

    def _listen(self, event: str, duration: float, **kwargs) -> None:
        if event == BACKEND_COMPILE:
            with self._lock:
                self.events.append((str(kwargs.get("fun_name", "?")), float(duration)))

    def __enter__(self) -> CompileLog:
        jax.monitoring.register_event_duration_secs_listener(self._listen)
        return self

    def __exit__(self, *exc) -> None:
        jax.monitoring.unregister_event_duration_listener(self._listen)

    def count(self, name: str | None = None) -> int:
        return sum(1 for fn, _ in self.events if name is None or fn == name)

    def seconds(self) -> float:
        return sum(s for _, s in self.events)
