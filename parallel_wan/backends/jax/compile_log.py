"""Which programs XLA built, and how long each took, from JAX's monitoring hook. Used to
report compile time and to check that the denoising step compiles once per expert. A program
loaded from the persistent compilation cache (compile_cache.py) counts as built (JAX reports it
under the same event, in the time the load took) and also in `hits`."""

from __future__ import annotations

import threading

import jax

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
CACHE_HIT = "/jax/compilation_cache/cache_hits"


class CompileLog:
    """`with CompileLog() as log:` records every backend compilation as (function name,
    seconds) in `log.events`."""

    def __init__(self):
        self.events: list[tuple[str, float]] = []
        self.hits = 0  # programs loaded from the persistent compilation cache
        self._lock = threading.Lock()

    def _listen(self, event: str, duration: float, **kwargs) -> None:
        if event == BACKEND_COMPILE:
            with self._lock:
                self.events.append((str(kwargs.get("fun_name", "?")), float(duration)))

    def _hit(self, event: str, **kwargs) -> None:
        if event == CACHE_HIT:
            with self._lock:
                self.hits += 1

    def __enter__(self) -> CompileLog:
        jax.monitoring.register_event_duration_secs_listener(self._listen)
        jax.monitoring.register_event_listener(self._hit)
        return self

    def __exit__(self, *exc) -> None:
        jax.monitoring.unregister_event_duration_listener(self._listen)
        jax.monitoring.unregister_event_listener(self._hit)

    def count(self, name: str | None = None) -> int:
        return sum(1 for fn, _ in self.events if name is None or fn == name)

    def seconds(self) -> float:
        return sum(s for _, s in self.events)
