"""/v1/videos: OpenAI's Videos API over the store. It validates and queues; it never touches the
model. The loop learns of a new job and of a DELETE through the store alone — a DELETE at its
next step vote."""

from __future__ import annotations

import os

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from ..fields import RequestError
from ..files import VARIANT_FILES, delete_files, variant_path, video_path
from ..store import UnknownCursor, is_id
from .errors import error, refusal
from .state import api_of
from .video_objects import deleted_object, no_content, poll_after, video_object
from .video_requests import answer, read_body

router = APIRouter()


@router.post("/v1/videos")
async def create(request: Request):
    api = api_of(request)
    try:
        body = await read_body(request, api.settings.max_body_bytes)
    except RequestError as exc:
        api.metrics.requests.labels("refused").inc()
        return refusal(exc)
    return await answer(request, api, body)


@router.get("/v1/videos")
async def listing(request: Request, limit: int = 20, after: str | None = None, order: str = "desc"):
    if not 0 <= limit <= 100:  # the API's range: 0 answers no jobs, and whether there are any
        return error(400, f"limit={limit} must be between 0 and 100", "limit")
    if order not in ("asc", "desc"):
        return error(400, f"order={order!r} must be asc or desc", "order")
    api = api_of(request)
    try:
        rows, more = api.store.page(limit, after, order)
    except UnknownCursor:
        return error(400, f"after={after!r} names no video of this server; give the id of a listed video", "after")
    data = [video_object(r, api.words, record=False) for r in rows]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": more,
    }


@router.get("/v1/videos/{video_id}")
async def retrieve(request: Request, video_id: str):
    # The poll, read in the event loop: a primary-key read from SQLite costs less than the hop to
    # a worker thread (measured: 0.35 against 1.2 ms of CPU per request with the hop).
    api = api_of(request)
    row = _found(api.store, video_id)
    if row is None:
        return _missing(video_id)
    return JSONResponse(video_object(row, api.words), headers=poll_after(row))


@router.get("/v1/videos/{video_id}/content")
async def content(request: Request, video_id: str, variant: str = "video"):
    api = api_of(request)
    row = await run_in_threadpool(_found, api.store, video_id)
    if row is None:
        return _missing(video_id)
    if variant in VARIANT_FILES:
        return await run_in_threadpool(_variant, api, row, variant)
    if variant != "video":
        return error(
            400, f"variant={variant!r} is not made here; ask for video (the mp4), thumbnail or spritesheet", "variant"
        )
    path = video_path(api.settings, row["id"])
    if row["status"] != "completed" or not os.path.exists(path):
        return error(404, no_content(row, api.words), "video_id")
    return FileResponse(path, media_type="video/mp4", filename=os.path.basename(path))


@router.delete("/v1/videos/{video_id}")
async def delete(request: Request, video_id: str):
    """Gone at once for every client (GET, content and lists: 404 / left out). A job not running
    loses its files here; a running one stops after its current step on every rank, and its
    server removes whatever it wrote — also when the DELETE comes during its decode (store.py)."""
    if not is_id(video_id):
        return _missing(video_id)
    api = api_of(request)
    had = await run_in_threadpool(api.store.delete, video_id)
    if had is None:
        return _missing(video_id)
    row = None
    if had == "in_progress":
        row = await run_in_threadpool(api.store.row, video_id)  # the answer says how far it got
    else:
        await run_in_threadpool(delete_files, api.settings, video_id)
        await run_in_threadpool(api.store.gone, video_id)
    return deleted_object(video_id, had, row)


def _variant(api, row: dict, variant: str):
    """A thumbnail or spritesheet: a completed job's, from its frames; a running job's latest
    preview (`x-preview-step`: the steps done when it was made), and a request for a newer one."""
    path, media = variant_path(api.settings, row["id"], variant), VARIANT_FILES[variant][1]
    if row["status"] == "in_progress":
        api.store.want_preview(row["id"])  # the loop makes one after its next step
        image = _image(path) if row["preview_step"] is not None else None
        if image is not None:
            return Response(image, media_type=media, headers={"x-preview-step": str(row["preview_step"])})
        message = f"video {row['id']} has no preview yet: one is made after its next step; ask again then"
        return error(404, message, "variant", headers=poll_after(row))
    image = _image(path) if row["status"] == "completed" else None
    if image is not None:
        return Response(image, media_type=media)
    return error(404, no_content(row, api.words).replace("mp4", variant), "video_id")


def _image(path: str) -> bytes | None:
    """A variant's bytes, read whole at once (a few kB), or None when there is none. Not a
    FileResponse: a running job's preview is replaced (renamed over) after every step it is asked
    for, and a FileResponse sends the size it stat()s, then reads the path again — a newer, larger
    preview in between overran that Content-Length and the server dropped the connection (seen
    as `test_a_running_job_previews_its_progress_as_one_process_would`'s rare RemoteProtocolError:
    "received 0 bytes, expected 316"). One open file keeps the version it opened."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _found(store, video_id: str) -> dict | None:
    return store.get(video_id) if is_id(video_id) else None


def _missing(video_id: str) -> JSONResponse:
    return error(404, f"no video with id {video_id!r}", "video_id")
