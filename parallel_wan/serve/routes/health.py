"""/health (readiness: load balancers ask it without the key, app.py) and /metrics (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from .state import api_of

router = APIRouter()


@router.get("/health")
async def healthy(request: Request):
    api = api_of(request)
    ready, problem = api.health()
    body = {
        "status": "ok" if ready else ("loading" if problem is None else "unavailable"),
        "model": api.served.model,
        "ranks": api.served.base.mesh.world_size,
    }
    if problem is not None:
        body["message"] = api.words.public(problem)
    return JSONResponse(body, status_code=200 if ready else 503)


@router.get("/metrics")
async def prometheus(request: Request):
    text = await run_in_threadpool(api_of(request).metrics.text)
    return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")
