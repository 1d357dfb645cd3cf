"""A new video from a video (config/source_video.py): `POST /v1/videos/{id}/remix` — a completed
job's video, its settings and seed, a new prompt — and `POST /v1/videos/edits` — `video` a
completed job (`{"id": …}`) or an uploaded mp4 — start from the source noised to `strength`
(video-to-video) — with the first frame of an image-to-video source job, or the request's own
`input_reference`; `POST /v1/videos/extensions` continues the source from its last frame with the
image-to-video model (extend=). Each is queued as a create is (README "Serving")."""

from __future__ import annotations

import dataclasses
import os

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from ...models.variants import IMAGE
from ..fields import RequestError
from ..files import video_path
from ..store import is_id
from .errors import refusal
from .state import api_of
from .video_requests import VideoSource, answer, read_body

router = APIRouter()


@router.post("/v1/videos/{video_id}/remix")
async def remix(request: Request, video_id: str):
    async def source_of(api, body):
        if "video" in body.fields or body.video is not None:
            raise RequestError("a remix's source is the video of its path; drop video (or use POST /v1/videos/edits)")
        return await run_in_threadpool(_completed, api, video_id, "video_id")

    return await _from_video(request, source_of)


@router.post("/v1/videos/edits")
async def edit(request: Request):
    async def source_of(api, body):
        source = await _source(api, body)
        if source.upload is not None:  # all of the upload (4k+1 frames) at its size, unless the fields say
            source = dataclasses.replace(source, settings={"num_frames": None})  # otherwise (sources.py)
        return source

    return await _from_video(request, source_of)


@router.post("/v1/videos/extensions")
async def extend(request: Request):
    """The video continued from its last frame by the image-to-video model: `seconds` is the whole
    video's length (the new part: the frames past the source's), or `num_frames` the new part's
    (its first frame is the source's last); answered as the stitched video."""

    async def source_of(api, body):
        if api.served.base.model.variant.input(IMAGE) is None:
            raise RequestError(
                f"extending a video continues it from its last frame with an image-to-video model (I2V-A14B, "
                f"TI2V-5B); this server runs model={api.served.model}, which is text-to-video",
                "video",
            )
        source = await _source(api, body)  # its length is read once stored (sources.py)
        settings = {k: v for k, v in source.settings.items() if k != "num_frames"}
        # its first frame is the source's last: not the image a source job was made from
        return dataclasses.replace(source, settings=settings, setting="extend", first_frame=None)

    return await _from_video(request, source_of)


async def _from_video(request: Request, source_of):
    """Read the body, find the source (`source_of(api, body)`), queue the job."""
    api = api_of(request)
    try:
        body = await read_body(request, api.settings.max_body_bytes, video=True)
        source = await source_of(api, body)
    except RequestError as exc:
        api.metrics.requests.labels("refused").inc()
        return refusal(exc)
    return await answer(request, api, body, source=source)


async def _source(api, body) -> VideoSource:
    given = body.fields.pop("video", None)
    if body.video is not None:
        return VideoSource(upload=body.video)
    if isinstance(given, dict) and set(given) == {"id"} and isinstance(given["id"], str):
        return await run_in_threadpool(_completed, api, given["id"], "video")
    raise RequestError(
        'video is required: {"id": "video_…"} (a completed video of this server) or an uploaded mp4',
        "video",
        code="missing_required_parameter" if given is None else None,
    )


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
