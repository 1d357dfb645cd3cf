"""Where a job's files live under storage_dir — every name made from the job's id, never from
anything a client sent (the video's names: report/output_names.py) — and removing them (a DELETE, at once
or once its running job has stopped)."""

from __future__ import annotations

import os
import shutil

from ..jobs.resume import state_dir
from ..report.output_names import one_video_names, video_name
from .fields import VIDEO_INPUTS

IMAGE_SUFFIXES = ("png", "jpg", "webp", "bmp")  # an uploaded input_reference, by its decoded format


def video_path(settings, video_id: str) -> str:
    return os.path.join(settings.videos_dir, video_name(video_id))


VARIANT_FILES = {"thumbnail": ("thumbnail.webp", "image/webp"), "spritesheet": ("spritesheet.jpg", "image/jpeg")}


def variant_path(settings, video_id: str, variant: str) -> str:
    """A content variant's image (serve/previews.py): the final one, or a running job's preview."""
    return os.path.join(settings.videos_dir, f"{video_id}.{VARIANT_FILES[variant][0]}")


LAST = ".last"  # the last frame's upload beside the first's (first-last-frame video)


def image_path(settings, video_id: str, suffix: str, part: str = "") -> str:
    """An uploaded image: the first frame's (`part` ""), or the last frame's (LAST)."""
    assert suffix in IMAGE_SUFFIXES and part in ("", LAST), (suffix, part)
    return os.path.join(settings.inputs_dir, f"{video_id}{part}.{suffix}")


def source_video_path(settings, video_id: str) -> str:
    """A remix's or an edit's source video: a copy of the source job's mp4, or the upload."""
    return os.path.join(settings.inputs_dir, f"{video_id}.mp4")


def audio_path(settings, video_id: str) -> str:
    """S2V's uploaded speech, byte for byte (ffmpeg reads it by its content, not its name)."""
    return os.path.join(settings.inputs_dir, f"{video_id}.audio")


def input_video_path(settings, video_id: str, field: str) -> str:
    """One of Animate's uploaded driving videos (`field`: fields.VIDEO_INPUTS), byte for byte."""
    assert field in VIDEO_INPUTS, field
    return os.path.join(settings.inputs_dir, f"{video_id}.{field}.mp4")


def delete_files(settings, video_id: str) -> None:
    """A job's video, sidecar, frames and variants, its uploaded images, audio and videos, and any saved
    loop state."""
    paths = [os.path.join(settings.videos_dir, name) for name in one_video_names(video_id)]
    paths += [variant_path(settings, video_id, variant) for variant in VARIANT_FILES]
    paths += [image_path(settings, video_id, suffix, part) for suffix in IMAGE_SUFFIXES for part in ("", LAST)]
    paths += [source_video_path(settings, video_id), audio_path(settings, video_id)]
    paths += [input_video_path(settings, video_id, field) for field in VIDEO_INPUTS]
    for path in paths:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
    shutil.rmtree(state_dir(settings.videos_dir, video_id), ignore_errors=True)
