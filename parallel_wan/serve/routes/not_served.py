"""The Videos API's endpoints this server does not serve, answered as the API's refusals (400 in
OpenAI's shape saying so) instead of the 405 a path beside /v1/videos/{id} would otherwise get:
characters, a Sora feature with no Wan counterpart."""

from __future__ import annotations

from fastapi import APIRouter, Request

from .errors import error

router = APIRouter()

CHARACTERS = (
    "characters are not served here: Wan 2.2 has no character references; make a video with POST /v1/videos "
    "(a first frame as input_reference on an I2V/TI2V server)"
)


def _unsupported(request: Request, message: str):
    return error(400, f"{request.method} {request.url.path}: {message}", code="unsupported_endpoint")


@router.post("/v1/videos/characters")
async def create_character(request: Request):
    return _unsupported(request, CHARACTERS)


@router.get("/v1/videos/characters/{character_id}")
async def get_character(request: Request, character_id: str):
    return _unsupported(request, CHARACTERS)
