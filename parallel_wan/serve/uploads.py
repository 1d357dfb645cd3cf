"""An uploaded `input_reference` (or `last_image`): decoded as an image or refused, then stored byte for byte (the
run reads the file as the command line's image= would, so the video is the CLI's) under a name
made from the job's id and the decoded format — never a name the client chose."""

from __future__ import annotations

import io
import os

from ..report.outputs import commit, stage
from .fields import RequestError
from .files import LAST, audio_path, image_path, input_video_path

LAST_IMAGE_FIELD = "last_image"  # the last frame (first-last-frame video): JSON or an upload

FORMATS = {"PNG": "png", "JPEG": "jpg", "WEBP": "webp", "BMP": "bmp"}
MAX_PIXELS = 8192 * 8192  # far above any video size; below PIL's decompression-bomb limit


def image_suffix(data: bytes, field: str = "input_reference") -> str:
    """The file suffix of an image's bytes (sent as `field`), after decoding them whole;
    RequestError otherwise."""
    from PIL import Image

    if not data:
        raise RequestError(f"{field} is empty; send a PNG or JPEG image", field)
    try:
        with Image.open(io.BytesIO(data)) as im:
            kind, (width, height) = im.format, im.size
            if width * height > MAX_PIXELS:
                raise RequestError(
                    f"{field} is {width}x{height} pixels; send an image of at most {MAX_PIXELS} pixels",
                    field,
                )
            im.load()  # decode every pixel: a truncated or forged file fails here, not in the job
    except RequestError:
        raise
    except Exception as exc:  # PIL raises many types for bad files
        raise RequestError(
            f"{field} could not be read as an image ({type(exc).__name__}); send a PNG or JPEG image",
            field,
        ) from None
    if kind not in FORMATS:
        raise RequestError(f"{field} is a {kind} image; send a PNG, JPEG, WebP or BMP image", field)
    return FORMATS[kind]


def store_image(settings, video_id: str, data: bytes, field: str = "input_reference") -> str:
    """Write the image as storage_dir/inputs/<id>.<suffix> — the last frame's (`last_image`) as
    <id>.last.<suffix> — atomically; returns its path."""
    path = image_path(settings, video_id, image_suffix(data, field), LAST if field == LAST_IMAGE_FIELD else "")
    return _write(path, data)


def _write(path: str, data: bytes) -> str:
    """The bytes at `path`, atomically; returns the path."""
    os.makedirs(os.path.dirname(path), exist_ok=True)

    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(data)

    commit([(stage(path, write), path)])
    return path


AUDIO_FIELD = "audio_reference"  # S2V's speech: JSON or an upload
MAX_AUDIO_BYTES = 64 << 20  # ten minutes of 16-bit 48 kHz stereo WAV is 110 MB; compressed speech far less


def store_audio(settings, video_id: str, data: bytes) -> str:
    """Write S2V's speech as storage_dir/inputs/<id>.audio, atomically; returns its path. Whether
    it is audio (decodes, long enough, not silence) the run's own check says, before the job is
    queued (config/s2v_inputs.py), as the command line's audio= is checked."""
    if not data:
        raise RequestError(f"{AUDIO_FIELD} is empty; send a WAV, FLAC or MP3 file", AUDIO_FIELD)
    if len(data) > MAX_AUDIO_BYTES:
        raise RequestError(
            f"{AUDIO_FIELD} is {len(data) >> 20} MB; send at most {MAX_AUDIO_BYTES >> 20} MB (a compressed format)",
            AUDIO_FIELD,
        )
    return _write(audio_path(settings, video_id), data)


def store_video(settings, video_id: str, field: str, data: bytes) -> str:
    """Write one of Animate's driving videos (`field`: pose_video, face_video, …) as
    storage_dir/inputs/<id>.<field>.mp4, atomically; returns its path. Whether it is a video of
    the right length and size (and a mask a mask) the run's own check says before the job is
    queued (config/animate_inputs.py), as the command line's are checked."""
    if not data:
        raise RequestError(f"{field} is empty; send an mp4", field)
    return _write(input_video_path(settings, video_id, field), data)
