"""The server's routes live in one router per resource (parallel_wan/serve/routes/): the app
has exactly the routers' routes, and each router answers for its own resource's paths only."""

from types import SimpleNamespace

from fastapi.routing import APIRoute

from parallel_wan.serve.app import ROUTERS, make_app

# Each router's module and the paths it owns (a path is one of these or below one).
RESOURCES = {
    "parallel_wan.serve.routes.videos": ("/v1/videos",),
    "parallel_wan.serve.routes.not_served": ("/v1/videos",),
    "parallel_wan.serve.routes.video_edits": ("/v1/videos",),
    "parallel_wan.serve.routes.health": ("/health", "/metrics"),
    "parallel_wan.serve.routes.models": ("/v1/models",),
    "parallel_wan.serve.routes.page": ("/",),
}


def _routes(routes) -> set:
    """(method, path) of every API route, through included routers (FastAPI ≥ 0.165 keeps an
    included router whole, as `original_router`; older versions copy its routes in)."""
    found = set()
    for r in routes:
        if isinstance(r, APIRoute):
            found |= {(method, r.path) for method in r.methods}
        elif hasattr(r, "original_router"):
            found |= _routes(r.original_router.routes)
    return found


def test_the_app_is_its_routers():
    served = SimpleNamespace(words=SimpleNamespace(including=lambda storage_dir: None))
    app = make_app(None, served, SimpleNamespace(storage_dir="/unused", max_body_bytes=1), None, None)
    from_routers = set().union(*(_routes(r.routes) for r in ROUTERS))
    assert _routes(app.routes) == from_routers
    assert {("POST", "/v1/videos"), ("DELETE", "/v1/videos/{video_id}"), ("GET", "/health")} <= from_routers


def test_each_router_answers_for_its_resource_only():
    assert {r.routes[0].endpoint.__module__ for r in ROUTERS} == set(RESOURCES)
    for router in ROUTERS:
        modules = {r.endpoint.__module__ for r in router.routes}
        assert len(modules) == 1 and modules <= set(RESOURCES), modules
        owned = RESOURCES[modules.pop()]
        for route in router.routes:
            assert any(route.path == p or (p != "/" and route.path.startswith(p + "/")) for p in owned), route.path
