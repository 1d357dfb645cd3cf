"""A create request (and a remix's or an edit's): its body read (JSON or a form with a file
uploaded), then checked as the CLI checks a run and queued before the reply."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field

from fastapi import Request
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from ...jobs.batch import batch_key
from ...report.outputs import commit, stage
from ..fields import VIDEO_INPUTS, RequestError, seconds_of
from ..files import source_video_path
from ..references import json_audio, json_image, json_last_image, json_videos
from ..sources import new_part, source_frames, upload_size
from ..store import IdempotencyConflict, QueueFull, new_id
from ..uploads import LAST_IMAGE_FIELD, store_audio, store_image, store_video
from .errors import error, no_retry, refusal
from .video_objects import video_object

# fields that hold an object; a form sends them as name[key] (an SDK's extra_body in a multipart
# request: vLLM-Omni's {"audio_url": …} beside an uploaded input_reference)
OBJECT_FIELDS = ("metadata", "extra_params", "audio_reference")


@dataclass
class Body:
    """A request's body: its fields and the files it carried — the first frame (a multipart
    `input_reference`, or inside JSON: references.py) and, for an edit or an extension, the
    uploaded `video`."""

    fields: dict
    image: bytes | None = None
    image_field: str | None = None  # the field that gave the image
    video: bytes | None = None
    last_image: bytes | None = None  # the last frame (first-last-frame video)
    audio: bytes | None = None  # S2V's speech (`audio_reference`)
    videos: dict = field(default_factory=dict)  # Animate's driving videos, by field (fields.VIDEO_INPUTS)


async def read_body(request: Request, max_bytes: int, video: bool = False) -> Body:
    """The JSON or form body; RequestError otherwise. `video`: the route takes an uploaded
    `video` beside the image (edits, extensions)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        try:
            fields = json.loads(await request.body())
        except ValueError as exc:
            raise RequestError(f"the body is not JSON ({exc}); send a JSON object or multipart/form-data") from None
        if not isinstance(fields, dict):
            raise RequestError('the body must be a JSON object of fields, e.g. {"prompt": "a cat"}')
        last, audio, videos = json_last_image(fields), json_audio(fields), json_videos(fields)
        return Body(fields, *json_image(fields), last_image=last, audio=audio, videos=videos)
    if kind not in ("multipart/form-data", "application/x-www-form-urlencoded"):
        raise RequestError(
            f"Content-Type {kind or '(none)'} is not read; send application/json or multipart/form-data", status=415
        )
    uploads = ("input_reference", "last_image", "audio_reference", *VIDEO_INPUTS) + (("video",) if video else ())
    try:
        form = await request.form(max_files=len(uploads), max_fields=64, max_part_size=max_bytes)
    except Exception as exc:  # starlette's MultiPartException and parser errors
        raise RequestError(f"the form could not be read ({exc})") from None
    fields, files = {}, {}
    for name, value in form.multi_items():
        if isinstance(value, UploadFile):
            if name not in uploads:
                raise RequestError(
                    f"{name} is a file; only {', '.join(uploads[:-1])} and {uploads[-1]} are uploads", name
                )
            if name in files:
                raise RequestError(f"{name} was given twice; give each field once", name)
            files[name] = await value.read()
            continue
        _put(fields, name, value)
    await form.close()
    if isinstance(fields.get("audio_reference"), dict):  # {"audio_url": data URL} as form fields
        if "audio_reference" in files:
            raise RequestError("audio_reference was given twice; give each field once", "audio_reference")
        files["audio_reference"] = json_audio(fields)
    for name in ("input_reference", "last_image", "audio_reference", *VIDEO_INPUTS):
        if name in fields:
            kind = {"audio_reference": "an audio"}.get(name, "a video" if name in VIDEO_INPUTS else "an image")
            raise RequestError(f"{name} must be {kind} file upload, not text; URLs and server paths are not read", name)
    if video and "video" in fields and "video" in files:
        raise RequestError("video was given twice; give each field once", "video")
    last, audio = files.get("last_image"), files.get("audio_reference")
    videos = {name: files[name] for name in VIDEO_INPUTS if name in files}
    if "input_reference" in files:
        return Body(fields, files["input_reference"], "input_reference", files.get("video"), last, audio, videos)
    # a form's reference_url: a data: URL
    return Body(fields, *json_image(fields), files.get("video"), last, audio, videos)


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


@dataclass(frozen=True)
class VideoSource:
    """What a remix, an edit or an extension starts from: a completed job (its mp4, copied, its
    run settings, which the request's fields override, and the first frame an image-to-video job
    was made from, copied too) or an uploaded video."""

    job: str | None = None  # the source job's id: remixed_from_video_id
    mp4: str | None = None  # its mp4 on the server
    settings: dict = field(default_factory=dict)  # its run settings, prompt and files dropped
    upload: bytes | None = None
    setting: str = "video"  # the run setting it sets: video= (remix, edits) or extend= (extensions)
    first_frame: bytes | None = None  # the source job's image (a remix keeps it unless the request gives one)

    @classmethod
    def of_job(cls, row: dict, mp4: str) -> VideoSource:
        settings = json.loads(row["settings"])
        first_frame = None
        # read now: a DELETE of the source removes its files
        if settings.get("image") and os.path.exists(settings["image"]):
            with open(settings["image"], "rb") as f:
                first_frame = f.read()
        settings = {k: v for k, v in settings.items() if k not in ("prompt", "image", "video", "extend")}
        return cls(job=row["id"], mp4=mp4, settings=settings, first_frame=first_frame)

    def store(self, settings, video_id: str) -> str:
        path = source_video_path(settings, video_id)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if self.upload is not None:
            if not self.upload:
                raise RequestError("video is empty; upload an mp4", "video")

            def write(tmp):
                with open(tmp, "wb") as f:
                    f.write(self.upload)

            commit([(stage(path, write), path)])
        else:
            commit([(stage(path, lambda tmp: shutil.copyfile(self.mp4, tmp)), path)])
        return path

    def digest(self) -> bytes:
        return hashlib.sha256(self.upload if self.upload is not None else str(self.job).encode()).digest()


async def answer(request: Request, api, body: Body, source: VideoSource | None = None):
    """Queue a create, remix, edit or extension and answer: the video object, the refusal, or the
    409 of an Idempotency-Key reused for another request (which OpenAI's SDKs must not retry).
    The first frame: the request's, else (a remix or an edit of an image-to-video job) the source
    job's."""
    fields, image, image_field = body.fields, body.image, body.image_field
    if image is None and source is not None and source.first_frame is not None:
        image, image_field = source.first_frame, "input_reference"
    idem = request.headers.get("idempotency-key")
    try:
        row, created = await run_in_threadpool(
            queue_video,
            api.store,
            api.served,
            api.settings,
            fields,
            image,
            idem,
            image_field,
            source,
            body.last_image,
            body.audio,
            body.videos,
        )
    except RequestError as exc:
        api.metrics.requests.labels("refused").inc()
        return refusal(exc)
    except IdempotencyConflict:
        api.metrics.requests.labels("refused").inc()
        message = f"Idempotency-Key {idem!r} was used for another request; use a new key for a new request"
        return no_retry(error(409, message, "Idempotency-Key"))
    except QueueFull as full:  # max_queued=: nothing was kept; OpenAI's SDKs wait Retry-After and ask again
        api.metrics.requests.labels("queue_full").inc()
        message = (
            f"the queue is full ({full.queued} videos wait, max_queued={api.settings.max_queued}); "
            f"ask again in {full.retry_after} s"
        )
        return error(429, message, headers={"retry-after": str(full.retry_after)})
    api.metrics.requests.labels("queued" if created else "repeated").inc()
    return video_object(row, api.words)


def queue_video(
    store,
    served,
    settings,
    fields: dict,
    image: bytes | None,
    idem: str | None,
    image_field: str | None = None,
    source: VideoSource | None = None,
    last_image: bytes | None = None,
    audio: bytes | None = None,
    videos: dict | None = None,
):
    """Validate (the CLI's checks) and commit the job before the reply; (its row, created).
    A refused request leaves nothing behind: no row, no file. `videos`: Animate's driving
    videos' bytes by field."""
    video_id, path, video, image_field = new_id(), None, None, image_field or "input_reference"
    last = speech = None
    driving = {}  # field → the stored video
    given, before = fields, 0  # before: an extension's source frames, which come before the new ones
    try:
        if image is not None:
            path = store_image(settings, video_id, image, image_field)
        if last_image is not None:
            last = store_image(settings, video_id, last_image, LAST_IMAGE_FIELD)
        if audio is not None:
            speech = store_audio(settings, video_id, audio)
        for name, data in (videos or {}).items():
            driving[name] = store_video(settings, video_id, name, data)
        if source is not None:
            video = source.store(settings, video_id)
        if source is not None and source.setting == "extend":
            before = source_frames(video)
            fields = new_part(served, fields, before)
        base = source.settings if source is not None else None
        if source is not None and source.upload is not None and source.setting == "video":
            base = {**base, **upload_size(served, fields, video)}
        setting = source.setting if source is not None else "video"
        spec, run_settings, notes = served.request(
            fields, path, image_field, video, base, setting, last, speech, driving
        )
        frames = spec.video.num_frames + max(before - 1, 0)
        if spec.video.s2v is not None:  # as long as the speech makes it (config/s2v_inputs.py)
            frames = spec.video.s2v.frames(spec.video.num_frames, spec.model.fps)
        if spec.video.animate is not None:  # as long as the pose video
            frames = spec.video.animate.frames
        digest = hashlib.sha256(
            json.dumps(given, sort_keys=True, default=str).encode()
            + hashlib.sha256(image or b"").digest()
            + (source.digest() if source is not None else b"")
            + hashlib.sha256(last_image or b"").digest()
            + hashlib.sha256(audio or b"").digest()
            + b"".join(name.encode() + hashlib.sha256(data).digest() for name, data in sorted((videos or {}).items()))
        ).hexdigest()
        job = {
            "id": video_id,
            "model": served.model,
            "prompt": spec.video.prompts[0],
            "size": f"{spec.video.width}x{spec.video.height}",
            "seconds": seconds_of(frames, spec.model.fps),  # the true duration (an extension's: the whole video)
            "settings": run_settings,
            "steps": spec.sampling.steps,
            # a remix's or an edit's source job; an extension continues its source, not remixes it
            "remixed_from": source.job if source is not None and source.setting == "video" else None,
            # what it shares with the jobs it may run beside (max_batch=); None: it runs alone
            "batch_key": batch_key(spec) if settings.max_batch > 1 else None,
            **notes,
        }
        row, created = store.add(job, idem, digest, settings.max_queued)
    except BaseException:
        _remove(path, video, last, speech, *driving.values())
        raise
    if not created:
        _remove(
            path, video, last, speech, *driving.values()
        )  # the retry's copies; the first request's files are the job's
    return row, created


def _remove(*paths) -> None:
    for path in paths:
        if path is not None:
            os.remove(path)
