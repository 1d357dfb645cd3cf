"""The HTTP side: OpenAI's Videos API over the store, in a process of its own beside rank 0's loop
(http_process.py). It validates and queues; it never touches the model. The loop learns of a new
job and of a DELETE through the store alone — a DELETE at its next step vote."""

from __future__ import annotations

import hashlib
import json
import os

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from .auth import authorized
from .fields import RequestError, seconds_of
from .files import delete_files, video_path
from .limits import BodyLimit
from .page import PAGE
from .store import FINISHED, IdempotencyConflict, is_id, new_id
from .uploads import store_image


def error(status: int, message: str, param: str | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "param": param, "type": "invalid_request_error"}},
        status_code=status,
        headers=headers,
    )


def progress_of(row: dict) -> int:
    """0 queued, 100 completed; in between, the share of denoising steps done (at most 99: the
    decode and the write follow the last step)."""
    if row["status"] == "completed":
        return 100
    return min(99, 100 * row["step"] // max(1, row["steps"]))


def video_object(row: dict, words, record: bool = True) -> dict:
    """A job as OpenAI's `Video` (every field the SDK's type needs), plus what we know besides:
    the step, whether it resumed, and once completed (`record`: not in lists) the sidecar's record.
    `words` (words.Words): its error and record as a client may read them — no server path."""
    video = {
        "id": row["id"],
        "object": "video",
        "model": row["model"],
        "status": row["status"],
        "progress": progress_of(row),
        "created_at": row["created_at"],
        "completed_at": row["completed_at"],
        "expires_at": None,
        "size": row["size"],
        "seconds": row["seconds"],
        "prompt": row["prompt"],
        "remixed_from_video_id": None,
        "error": None,
        "step": row["step"],
        "steps": row["steps"],
        "resumed_from_step": row["resumed_from_step"],
    }
    if row["status"] == "failed":
        video["error"] = {"code": "generation_failed", "message": words.public(row["error"] or "failed")}
    if record and row["status"] == "completed" and row["record"]:
        video["record"] = words.record(json.loads(row["record"]))
    return video


def no_content(row: dict, words) -> str:
    """Why GET …/content has no mp4 for this job: not yet, or (cancelled, failed) never."""
    if row["status"] == "cancelled":
        return f"video {row['id']} was cancelled: it has no mp4 and never will"
    if row["status"] == "failed":
        return (
            f"video {row['id']} failed ({words.public(row['error'] or 'no reason recorded')}): it has no mp4 and "
            "never will; send the request again to try once more"
        )
    if row["status"] == "completed":
        return f"video {row['id']} is completed but its mp4 is gone from the server"
    return f"video {row['id']} is {row['status']}; its mp4 is there once it is completed"


def deleted_object(video_id: str, had: str, row: dict | None) -> dict:
    """OpenAI's deleted object, answered at once, with what happens to the job: `status` (what
    GET says now) and `message`. A running job goes on until its current step ends."""
    if had == "in_progress":
        step = f" (step {row['step']} of {row['steps']} done)" if row else ""
        status, message = (
            "in_progress",
            (
                f"{video_id} is running{step}: it stops after its current step, then it is cancelled and nothing of "
                "it is "
                f"kept; GET /v1/videos/{video_id} says cancelled once it has stopped"
            ),
        )
    elif had == "queued":
        status, message = "cancelled", f"{video_id} was queued: it is cancelled and will not run"
    else:
        status, message = "deleted", f"{video_id} ({had}) and its files are deleted"
    return {"id": video_id, "object": "video.deleted", "deleted": True, "status": status, "message": message}


def make_app(store, served, settings, health, metrics, key: bytes | None = None) -> FastAPI:
    """The FastAPI app of one server: `store` (the queue), `served` (what requests resolve
    against), `settings` (ServerSettings), `health()` → (ready, problem), `metrics`, `key` (the
    API key: auth.api_key(); None: no key asked)."""
    app = FastAPI(title="parallel_wan", docs_url=None, redoc_url=None, openapi_url=None)
    words = served.words.including(settings.storage_dir)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(KeyCheck, key=key)

    def found(video_id: str) -> dict | None:
        return store.get(video_id) if is_id(video_id) else None

    def missing(video_id: str) -> JSONResponse:
        return error(404, f"no video with id {video_id!r}", "video_id")

    @app.post("/v1/videos")
    async def create(request: Request):
        try:
            fields, image = await _read_fields(request, settings.max_body_bytes)
        except RequestError as exc:
            metrics.requests.labels("refused").inc()
            return error(exc.status, str(exc), exc.param)
        idem = request.headers.get("idempotency-key")
        try:
            row, created = await run_in_threadpool(_queue, store, served, settings, fields, image, idem)
        except RequestError as exc:
            metrics.requests.labels("refused").inc()
            return error(exc.status, str(exc), exc.param)
        except IdempotencyConflict:
            metrics.requests.labels("refused").inc()
            return error(
                409,
                f"Idempotency-Key {idem!r} was used for another request; use a new key for a new request",
                "Idempotency-Key",
            )
        metrics.requests.labels("queued" if created else "repeated").inc()
        return video_object(row, words)

    @app.get("/v1/videos")
    async def listing(limit: int = 20, after: str | None = None, order: str = "desc"):
        if not 1 <= limit <= 100:
            return error(400, f"limit={limit} must be between 1 and 100", "limit")
        if order not in ("asc", "desc"):
            return error(400, f"order={order!r} must be asc or desc", "order")
        rows, more = store.page(limit, after, order)
        data = [video_object(r, words, record=False) for r in rows]
        return {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": more,
        }

    @app.get("/v1/videos/{video_id}")
    async def retrieve(video_id: str):
        # The poll, read in the event loop: a primary-key read from SQLite costs less than the hop to
        # a worker thread (measured: 0.35 against 1.2 ms of CPU per request with the hop).
        row = found(video_id)
        return missing(video_id) if row is None else JSONResponse(video_object(row, words))

    @app.get("/v1/videos/{video_id}/content")
    async def content(video_id: str, variant: str = "video"):
        row = await run_in_threadpool(found, video_id)
        if row is None:
            return missing(video_id)
        if variant != "video":
            return error(400, f"variant={variant!r} is not made here; ask for variant=video (the mp4)", "variant")
        path = video_path(settings, row["id"])
        if row["status"] != "completed" or not os.path.exists(path):
            return error(404, no_content(row, words), "video_id")
        return FileResponse(path, media_type="video/mp4", filename=f"{row['id']}.mp4")

    @app.delete("/v1/videos/{video_id}")
    async def delete(video_id: str):
        if not is_id(video_id):
            return missing(video_id)
        had = await run_in_threadpool(store.cancel, video_id)
        if had is None:
            return missing(video_id)
        row = None
        if had in FINISHED:
            await run_in_threadpool(delete_files, settings, video_id)
            await run_in_threadpool(store.remove, video_id)
        elif had == "queued":
            await run_in_threadpool(delete_files, settings, video_id)
        else:  # running: the answer says how far it is
            row = await run_in_threadpool(found, video_id)
        return deleted_object(video_id, had, row)

    @app.get("/health")
    async def healthy():
        ready, problem = health()
        body = {
            "status": "ok" if ready else ("loading" if problem is None else "unavailable"),
            "model": served.model,
            "ranks": served.base.mesh.world_size,
        }
        if problem is not None:
            body["message"] = words.public(problem)
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get("/v1/models")
    async def models():
        return {
            "object": "list",
            "data": [{"id": served.model, "object": "model", "created": 0, "owned_by": "parallel_wan"}],
        }

    @app.get("/metrics")
    async def prometheus():
        text = await run_in_threadpool(metrics.text)
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/")
    async def page():
        return HTMLResponse(PAGE)

    return app


async def _read_fields(request: Request, max_bytes: int) -> tuple[dict, bytes | None]:
    """(fields, the uploaded image's bytes) of a JSON or form body; RequestError otherwise."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    image = None
    if kind == "application/json":
        try:
            fields = json.loads(await request.body())
        except ValueError as exc:
            raise RequestError(f"the body is not JSON ({exc}); send a JSON object or multipart/form-data") from None
        if not isinstance(fields, dict):
            raise RequestError('the body must be a JSON object of fields, e.g. {"prompt": "a cat"}')
        if "input_reference" in fields:
            raise RequestError(
                "input_reference must be an image file uploaded with multipart/form-data; URLs and "
                "server paths are not read",
                "input_reference",
            )
        return fields, None
    if kind not in ("multipart/form-data", "application/x-www-form-urlencoded"):
        raise RequestError(
            f"Content-Type {kind or '(none)'} is not read; send application/json or multipart/form-data", status=415
        )
    try:
        form = await request.form(max_files=1, max_fields=64, max_part_size=max_bytes)
    except Exception as exc:  # starlette's MultiPartException and parser errors
        raise RequestError(f"the form could not be read ({exc})") from None
    fields = {}
    for name, value in form.multi_items():
        if name in fields:
            raise RequestError(f"{name} was given twice; give each field once", name)
        if isinstance(value, UploadFile):
            if name != "input_reference":
                raise RequestError(f"{name} is a file; only input_reference is an upload", name)
            image = await value.read()
            fields[name] = True
        else:
            fields[name] = value
    if "input_reference" in fields and image is None:
        raise RequestError(
            "input_reference must be an image file upload, not text; URLs and server paths are not read",
            "input_reference",
        )
    fields.pop("input_reference", None)
    await form.close()
    return fields, image


def _queue(store, served, settings, fields: dict, image: bytes | None, idem: str | None):
    """Validate (the CLI's checks) and commit the job before the reply; (its row, created).
    A refused request leaves nothing behind: no row, no file."""
    video_id, path = new_id(), None
    try:
        if image is not None:
            path = store_image(settings, video_id, image)
        spec, run_settings = served.request(fields, path)
        digest = hashlib.sha256(
            json.dumps(fields, sort_keys=True, default=str).encode() + hashlib.sha256(image or b"").digest()
        ).hexdigest()
        video = {
            "id": video_id,
            "model": served.model,
            "prompt": spec.video.prompts[0],
            "size": f"{spec.video.width}x{spec.video.height}",
            "seconds": str(fields.get("seconds") or seconds_of(spec.video.num_frames, spec.model.fps)),
            "settings": run_settings,
            "steps": spec.sampling.steps,
        }
        row, created = store.add(video, idem, digest)
    except BaseException:
        if path is not None:
            os.remove(path)
        raise
    if not created and path is not None:
        os.remove(path)  # the retry's copy; the first request's image is the job's
    return row, created


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
