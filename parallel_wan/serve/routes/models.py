"""/v1/models: the model this server loaded, under every name a request may give it
(served.py: the preset's, the checkpoint folder's, the operator's served_model_names)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from .errors import refusal
from .state import api_of

router = APIRouter()


def _model(name: str) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": "parallel_wan"}


@router.get("/v1/models")
async def models(request: Request):
    return {"object": "list", "data": [_model(name) for name in api_of(request).served.names]}


@router.get("/v1/models/{model_id:path}")
async def model(request: Request, model_id: str):
    served = api_of(request).served
    return _model(model_id) if served.model_named(model_id) else refusal(served.unknown_model(model_id))
