"""The HTTP side: OpenAI's Videos API over the store, in a process of its own beside rank 0's loop
(http_process.py). The app is its routers (routes/: one per resource) behind the body limit and
the key check."""

from __future__ import annotations

from fastapi import FastAPI

from .auth import authorized
from .limits import BodyLimit
from .routes.errors import answer_framework_errors_in_openai_shape, error
from .routes.health import router as health_router
from .routes.models import router as models_router
from .routes.not_served import router as not_served_router
from .routes.page import router as page_router
from .routes.state import ApiState
from .routes.video_edits import router as video_edits_router
from .routes.videos import router as videos_router

# Every route the API has, one router per resource (tests/serve/test_routes.py holds that the app
# has these routes and no other).
ROUTERS = (videos_router, video_edits_router, not_served_router, health_router, models_router, page_router)


def make_app(store, served, settings, health, metrics, key: bytes | None = None) -> FastAPI:
    """The FastAPI app of one server: `store` (the queue), `served` (what requests resolve
    against), `settings` (ServerSettings), `health()` → (ready, problem), `metrics`, `key` (the
    API key: auth.api_key(); None: no key asked)."""
    app = FastAPI(title="parallel_wan", docs_url=None, redoc_url=None, openapi_url=None)
    words = served.words.including(settings.storage_dir)
    app.state.api = ApiState(store, served, settings, health, metrics, words)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(KeyCheck, key=key)
    for router in ROUTERS:
        app.include_router(router)
    answer_framework_errors_in_openai_shape(app, ROUTERS)
    return app


class KeyCheck:
    """PARALLEL_WAN_API_KEY (auth.py) as plain ASGI middleware: every path but /health."""

    def __init__(self, app, key: bytes | None):
        self.app, self.key = app, key

    async def __call__(self, scope, receive, send):
        if self.key is None or scope["type"] != "http" or scope["path"] == "/health":
            return await self.app(scope, receive, send)
        header = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), None)
        if authorized(header, self.key):
            return await self.app(scope, receive, send)
        challenge = 'Basic realm="parallel_wan"' if scope["path"] == "/" else "Bearer"
        response = error(
            401,
            "a valid API key is needed: send Authorization: Bearer <PARALLEL_WAN_API_KEY>",
            headers={"WWW-Authenticate": challenge},
        )
        await response(scope, receive, send)
