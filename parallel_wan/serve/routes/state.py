"""What the routes answer from, held by the app (`app.state.api`, set by app.py): routers are
module-level, so every app built (one per server, several in the tests) carries its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Request


@dataclass(frozen=True)
class ApiState:
    store: object  # store.Store: the queue
    served: object  # served.py: what requests resolve against
    settings: object  # settings.ServerSettings
    health: Callable  # () → (ready, problem)
    metrics: object  # metrics.ServerMetrics
    words: object  # words.Words: errors and records in the request's words, no server path


def api_of(request: Request) -> ApiState:
    return request.app.state.api
