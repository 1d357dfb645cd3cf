"""The first frame given inside a JSON body: OpenAI's `input_reference` and vLLM-Omni's
`image_reference` as `{"image_url": "data:image/png;base64,…"}` (their `{"file_id": …}` names an
upload to OpenAI's Files API, which this server has not), SGLang's `reference_url` as a data:
URL. The server fetches nothing: an http(s) URL is refused, never opened. The bytes then go the
way of a multipart upload (uploads.py): decoded whole as an image or refused."""

from __future__ import annotations

import base64
import binascii

from .fields import IMAGE_FIELDS, VIDEO_INPUTS, RequestError, _shown

HOW = "send the image as a data: URL (data:image/png;base64,…) or upload it as multipart input_reference"


def json_image(fields: dict) -> tuple[bytes | None, str | None]:
    """(the image's bytes, the field that gave it) of a JSON body's fields, which lose their
    image fields; (None, None) when none is given (null is not given)."""
    given = {key: fields.pop(key) for key in IMAGE_FIELDS if fields.get(key) is not None}
    for key in IMAGE_FIELDS:
        fields.pop(key, None)
    if not given:
        return None, None
    if len(given) > 1:
        raise RequestError(f"{' and '.join(given)} each give the first frame; give one of them", list(given)[1])
    ((key, value),) = given.items()
    if key == "reference_url":
        return data_url_bytes(value, key), key
    if not isinstance(value, dict) or len(value) != 1 or not {"image_url", "file_id"} & set(value):
        raise RequestError(
            f'{key}={_shown(value)} must be {{"image_url": "data:image/png;base64,…"}}; or {HOW.split(" or ")[1]}',
            key,
        )
    if "file_id" in value:
        raise RequestError(
            f"{key}.file_id names an upload to OpenAI's Files API, which this server has not; {HOW}",
            key,
        )
    return data_url_bytes(value["image_url"], f"{key}.image_url"), key


def json_last_image(fields: dict) -> bytes | None:
    """The last frame's bytes of a JSON body's `last_image` (`{"image_url": "data:…"}`, as
    input_reference), which the fields lose; None when not given."""
    return _wrapped(fields, "last_image", "image_url", "data:image/png;base64,…")


def _wrapped(fields: dict, field: str, key: str, example: str, bare: bool = False) -> bytes | None:
    """The bytes of a JSON body's `field` given as `{key: data URL}` (`bare`: or the data URL
    itself), which the fields lose; None when not given."""
    value = fields.pop(field, None)
    if value is None:
        return None
    if bare and isinstance(value, str):
        return data_url_bytes(value, field, _how(field, example), example)
    if not isinstance(value, dict) or set(value) != {key}:
        raise RequestError(
            f'{field}={_shown(value)} must be {{"{key}": "{example}"}}; or upload it as multipart {field}', field
        )
    return data_url_bytes(value[key], f"{field}.{key}", _how(field, example), example)


def _how(field: str, example: str) -> str:
    return f"send it as a data: URL ({example}) or upload it as multipart {field}"


def data_url_bytes(url, where: str, how: str = HOW, example: str = "data:image/png;base64,…") -> bytes:
    """The bytes of a base64 data: URL; RequestError for anything else (a URL to fetch above all).
    `how`: what the refusal tells the client to send instead; `example`: a data URL of the kind."""
    param = where.split(".")[0]
    if not isinstance(url, str):
        raise RequestError(f"{where}={_shown(url)} must be a data: URL string; {how}", param)
    if not url.startswith("data:"):
        raise RequestError(f"{where}={_shown(url)} is not a data: URL, and this server fetches nothing; {how}", param)
    header, comma, payload = url.partition(",")
    if not comma or not header.endswith(";base64"):
        raise RequestError(f"{where} must be a base64 data: URL ({example})", param)
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise RequestError(f"{where} is not valid base64 after 'base64,'", param) from None


def json_audio(fields: dict) -> bytes | None:
    """S2V's speech of a JSON body's `audio_reference` (vLLM-Omni's field, as
    `{"audio_url": "data:audio/wav;base64,…"}`), which the fields lose; None when not given."""
    return _wrapped(fields, "audio_reference", "audio_url", "data:audio/wav;base64,…")


def json_videos(fields: dict) -> dict[str, bytes]:
    """Animate's driving videos of a JSON body (`pose_video`, `face_video`, `background_video`,
    `mask_video`), each a data: URL (`"data:video/mp4;base64,…"`) or `{"video_url": data URL}`,
    which the fields lose; {} when none is given."""
    videos = {key: _wrapped(fields, key, "video_url", "data:video/mp4;base64,…", bare=True) for key in VIDEO_INPUTS}
    return {key: data for key, data in videos.items() if data is not None}
