"""/v1/models: the one model this server loaded."""

from __future__ import annotations

from fastapi import APIRouter, Request

from .state import api_of

router = APIRouter()


@router.get("/v1/models")
async def models(request: Request):
    return {
        "object": "list",
        "data": [{"id": api_of(request).served.model, "object": "model", "created": 0, "owned_by": "parallel_wan"}],
    }
