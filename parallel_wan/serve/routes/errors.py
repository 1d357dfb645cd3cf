"""OpenAI's error body, `{"error": {"message", "type", "param", "code"}}` (its ErrorResponse: all
four keys present, `param` and `code` may be null): every refusal the API answers — the routes',
the key check's, the body limit's and the web framework's own (an unknown route, a method a route
does not take, a query value of the wrong type), which FastAPI would otherwise answer as
`{"detail": …}` with 422. Strict clients (OpenAI's SDKs with response validation) parse these."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

log = logging.getLogger("parallel_wan")

# The code a refusal carries when its route names none: a word per HTTP status, as OpenAI's own
# errors carry one (`invalid_api_key`, `model_not_found`, …).
CODES = {
    400: "invalid_value",
    401: "invalid_api_key",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "request_too_large",
    429: "queue_full",
}


def body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    # 429: OpenAI's rate-limit type ("requests"), which its SDKs retry after Retry-After
    kind = "server_error" if status >= 500 else "requests" if status == 429 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code or CODES.get(status)}}


def error(
    status: int, message: str, param: str | None = None, headers: dict | None = None, code: str | None = None
) -> JSONResponse:
    return JSONResponse(body(status, message, param, code), status_code=status, headers=headers)


def refusal(exc) -> JSONResponse:
    """A RequestError (serve/fields.py) as the answer: its status, message, field and code."""
    return error(exc.status, str(exc), exc.param, code=exc.code)


def no_retry(response: JSONResponse) -> JSONResponse:
    """OpenAI's SDKs retry a 409 (and 408, 429, 5xx) unless told not to: a refusal that a retry
    cannot change says so (their `x-should-retry` header)."""
    response.headers["x-should-retry"] = "false"
    return response


def answer_framework_errors_in_openai_shape(app: FastAPI, routers) -> None:
    """The framework's refusals as the routes' own: 404 and 405 with what the server has, and a
    query value it cannot read as 400 naming the parameter (not FastAPI's 422). `routers`: the
    app's (their routes say which methods a path takes)."""

    @app.exception_handler(HTTPException)
    async def http_refusal(request: Request, exc: HTTPException):
        where = f"{request.method} {request.url.path}"
        if exc.status_code == 404:
            message = f"no such route: {where}; the API is /v1/videos and /v1/models (and /health)"
            return error(404, message)
        if exc.status_code == 405:
            # every route of the path (the framework's Allow names the first route's methods only)
            allowed = ", ".join(_methods_of(routers, request.url.path))
            return error(405, f"{where} is not allowed; this path takes {allowed}", headers={"Allow": allowed})
        return error(exc.status_code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(Exception)
    async def failure(request: Request, exc: Exception):
        # a bug of ours: the log has the traceback; the client the API's shape, without a path
        log.exception("%s %s failed", request.method, request.url.path)
        message = (
            f"the server failed to answer {request.method} {request.url.path} ({type(exc).__name__}); its log says why"
        )
        return error(500, message, code="server_error")

    @app.exception_handler(RequestValidationError)
    async def unreadable_value(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        param = str(first.get("loc", ("", "?"))[-1])
        value = first.get("input")
        return error(400, f"{param}={value!r} cannot be read: {first.get('msg', 'invalid value')}", param)


def _methods_of(routers, path: str) -> list[str]:
    routes = [r for router in routers for r in router.routes if r.methods and r.path_regex.match(path)]
    return sorted({method for route in routes for method in route.methods})
