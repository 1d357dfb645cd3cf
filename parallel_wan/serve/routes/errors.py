"""OpenAI's error body: every refusal the API answers, and the key check's."""

from __future__ import annotations

from fastapi.responses import JSONResponse


def error(status: int, message: str, param: str | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "param": param, "type": "invalid_request_error"}},
        status_code=status,
        headers=headers,
    )
