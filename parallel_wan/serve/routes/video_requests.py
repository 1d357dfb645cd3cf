"""A create request: its body read (JSON or a form with the first frame uploaded), then checked
as the CLI checks a run and queued before the reply."""

from __future__ import annotations

import hashlib
import json
import os

from fastapi import Request
from starlette.datastructures import UploadFile

from ..fields import RequestError, seconds_of
from ..references import json_image
from ..store import new_id
from ..uploads import store_image

OBJECT_FIELDS = ("metadata", "extra_params")  # fields that hold an object; a form sends them as name[key]


async def read_fields(request: Request, max_bytes: int) -> tuple[dict, bytes | None, str | None]:
    """(fields, the first frame's bytes, the field that gave them) of a JSON or form body;
    RequestError otherwise. JSON gives the image inside the body (references.py), a form as an
    uploaded file."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        try:
            fields = json.loads(await request.body())
        except ValueError as exc:
            raise RequestError(f"the body is not JSON ({exc}); send a JSON object or multipart/form-data") from None
        if not isinstance(fields, dict):
            raise RequestError('the body must be a JSON object of fields, e.g. {"prompt": "a cat"}')
        return (fields, *json_image(fields))
    if kind not in ("multipart/form-data", "application/x-www-form-urlencoded"):
        raise RequestError(
            f"Content-Type {kind or '(none)'} is not read; send application/json or multipart/form-data", status=415
        )
    try:
        form = await request.form(max_files=1, max_fields=64, max_part_size=max_bytes)
    except Exception as exc:  # starlette's MultiPartException and parser errors
        raise RequestError(f"the form could not be read ({exc})") from None
    fields, image = {}, None
    for name, value in form.multi_items():
        if isinstance(value, UploadFile):
            if name != "input_reference":
                raise RequestError(f"{name} is a file; only input_reference is an upload", name)
            image = await value.read()
            value = True
        _put(fields, name, value)
    await form.close()
    if "input_reference" in fields and image is None:
        raise RequestError(
            "input_reference must be an image file upload, not text; URLs and server paths are not read",
            "input_reference",
        )
    fields.pop("input_reference", None)
    if image is not None:
        return fields, image, "input_reference"
    return (fields, *json_image(fields))  # a form's reference_url: a data: URL as text


def _put(fields: dict, name: str, value) -> None:
    """One form field: `metadata[key]` (how the openai SDK sends an object in a form) into an
    object; a field given twice is refused."""
    outer, bracket, rest = name.partition("[")
    if bracket and rest.endswith("]") and outer in OBJECT_FIELDS:
        inner = fields.setdefault(outer, {})
        if not isinstance(inner, dict) or rest[:-1] in inner:
            raise RequestError(f"{name} was given twice; give each field once", outer)
        inner[rest[:-1]] = value
        return
    if name in fields:
        raise RequestError(f"{name} was given twice; give each field once", name)
    fields[name] = value


def queue_video(
    store, served, settings, fields: dict, image: bytes | None, idem: str | None, image_field: str | None = None
):
    """Validate (the CLI's checks) and commit the job before the reply; (its row, created).
    A refused request leaves nothing behind: no row, no file."""
    video_id, path, image_field = new_id(), None, image_field or "input_reference"
    try:
        if image is not None:
            path = store_image(settings, video_id, image, image_field)
        spec, run_settings, notes = served.request(fields, path, image_field)
        digest = hashlib.sha256(
            json.dumps(fields, sort_keys=True, default=str).encode() + hashlib.sha256(image or b"").digest()
        ).hexdigest()
        video = {
            "id": video_id,
            "model": served.model,
            "prompt": spec.video.prompts[0],
            "size": f"{spec.video.width}x{spec.video.height}",
            "seconds": seconds_of(spec.video.num_frames, spec.model.fps),  # the true duration, whatever was asked
            "settings": run_settings,
            "steps": spec.sampling.steps,
            **notes,
        }
        row, created = store.add(video, idem, digest)
    except BaseException:
        if path is not None:
            os.remove(path)
        raise
    if not created and path is not None:
        os.remove(path)  # the retry's copy; the first request's image is the job's
    return row, created
