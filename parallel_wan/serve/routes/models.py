"""/v1/models: the model this server loaded, under every name a request may give it
(served.py: the preset's, the checkpoint folder's, the operator's served_model_names)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from .errors import refusal
from .state import api_of

router = APIRouter()


def _model(name: str, served) -> dict:
    """OpenAI's Model, and what the model makes from (`task`: t2v, i2v or ti2v — whether the server
    extends videos, which needs an image-to-video model; the page asks)."""
    return {"id": name, "object": "model", "created": 0, "owned_by": "parallel_wan", "task": served.base.model.task}


@router.get("/v1/models")
async def models(request: Request):
    served = api_of(request).served
    return {"object": "list", "data": [_model(name, served) for name in served.names]}


@router.get("/v1/models/{model_id:path}")
async def model(request: Request, model_id: str):
    served = api_of(request).served
    return _model(model_id, served) if served.model_named(model_id) else refusal(served.unknown_model(model_id))
