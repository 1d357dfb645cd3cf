"""A create request: its body read (JSON or a form with the first frame uploaded), then checked
as the CLI checks a run and queued before the reply."""

from __future__ import annotations

import hashlib
import json
import os

from fastapi import Request
from starlette.datastructures import UploadFile

from ..fields import RequestError, seconds_of
from ..store import new_id
from ..uploads import store_image


async def read_fields(request: Request, max_bytes: int) -> tuple[dict, bytes | None]:
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


def queue_video(store, served, settings, fields: dict, image: bytes | None, idem: str | None):
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
