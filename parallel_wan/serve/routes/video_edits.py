"""A new video from a video (video-to-video, config/source_video.py): `POST /v1/videos/{id}/remix`
— a completed job's video, its settings and seed, a new prompt — and `POST /v1/videos/edits` —
`video` a completed job (`{"id": …}`) or an uploaded mp4 — each queued as a create is, starting
from the source noised to `strength` (an extension field; README "Serving")."""

from __future__ import annotations

import os

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from ..fields import RequestError
from ..files import video_path
from ..store import IdempotencyConflict, is_id
from .errors import error, no_retry, refusal
from .state import api_of
from .video_objects import video_object
from .video_requests import VideoSource, queue_video, read_fields

router = APIRouter()


@router.post("/v1/videos/{video_id}/remix")
async def remix(request: Request, video_id: str):
    api = api_of(request)
    try:
        fields, _, _ = await read_fields(request, api.settings.max_body_bytes, upload="video")
        source = await run_in_threadpool(_completed, api, video_id, "video_id")
        if "video" in fields:
            raise RequestError("a remix's source is the video of its path; drop video (or use POST /v1/videos/edits)")
    except RequestError as exc:
        api.metrics.requests.labels("refused").inc()
        return refusal(exc)
    return await _queue(request, api, fields, source)


@router.post("/v1/videos/edits")
async def edit(request: Request):
    api = api_of(request)
    try:
        fields, upload, _ = await read_fields(request, api.settings.max_body_bytes, upload="video")
        given = fields.pop("video", None)
        if upload is not None:  # as long as the upload (4k+1 frames) unless num_frames or seconds say otherwise
            source = VideoSource(upload=upload, settings={"num_frames": None})
        elif isinstance(given, dict) and set(given) == {"id"} and isinstance(given["id"], str):
            source = await run_in_threadpool(_completed, api, given["id"], "video")
        else:
            raise RequestError(
                'video is required: {"id": "video_…"} (a completed video of this server) or an uploaded mp4',
                "video",
                code="missing_required_parameter" if given is None else None,
            )
    except RequestError as exc:
        api.metrics.requests.labels("refused").inc()
        return refusal(exc)
    return await _queue(request, api, fields, source)


def _completed(api, video_id: str, param: str) -> VideoSource:
    row = api.store.get(video_id) if is_id(video_id) else None
    if row is None:
        raise RequestError(f"no video with id {video_id!r}", param, status=404)
    mp4 = video_path(api.settings, row["id"])
    if row["status"] != "completed" or not os.path.exists(mp4):
        raise RequestError(
            f"video {video_id} is {row['status']}; a remix or an edit starts from a completed one", param
        )
    return VideoSource.of_job(row, mp4)


async def _queue(request: Request, api, fields: dict, source: VideoSource):
    idem = request.headers.get("idempotency-key")
    try:
        row, created = await run_in_threadpool(
            queue_video, api.store, api.served, api.settings, fields, None, idem, None, source
        )
    except RequestError as exc:
        api.metrics.requests.labels("refused").inc()
        return refusal(exc)
    except IdempotencyConflict:
        api.metrics.requests.labels("refused").inc()
        message = f"Idempotency-Key {idem!r} was used for another request; use a new key for a new request"
        return no_retry(error(409, message, "Idempotency-Key"))
    api.metrics.requests.labels("queued" if created else "repeated").inc()
    return video_object(row, api.words)
