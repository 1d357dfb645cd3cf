"""/v1/models: the model this server loaded, under every name a request may give it
(served.py: the preset's, the checkpoint folder's, the operator's served_model_names)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from ...models.variants import IMAGE
from ..fields import FIELD_OF
from .errors import refusal
from .state import api_of

router = APIRouter()


def _model(name: str, served) -> dict:
    """OpenAI's Model, and `extends`: whether the model takes a first frame, so that the server
    continues videos (POST /v1/videos/extensions; the page asks); `loras`: the LoRAs a request
    may name (lora_dir=), each with its recipe; `inputs`: what a request may give besides the
    prompt, by its request field (an image's `input_reference`, a last frame's `last_image`,
    S2V's speech's `audio_reference`, Animate's driving videos) and whether the model needs
    it — the page shows a field per input."""
    variant = served.base.model.variant
    # an extension is an image-to-video run from a video's last frame: not S2V's or Animate's
    extends = variant.input(IMAGE) is not None and not variant.forward_inputs
    loras = [lora.listing() for lora in served.loras.values()]
    inputs = [{"field": FIELD_OF[i.name], "required": i.required} for i in variant.inputs if i.name in FIELD_OF]
    return {
        "id": name,
        "object": "model",
        "created": 0,
        "owned_by": "parallel_wan",
        "extends": extends,
        "inputs": inputs,
        "loras": loras,
    }


@router.get("/v1/models")
async def models(request: Request):
    served = api_of(request).served
    return {"object": "list", "data": [_model(name, served) for name in served.names]}


@router.get("/v1/models/{model_id:path}")
async def model(request: Request, model_id: str):
    served = api_of(request).served
    return _model(model_id, served) if served.model_named(model_id) else refusal(served.unknown_model(model_id))
