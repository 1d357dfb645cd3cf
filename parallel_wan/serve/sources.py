"""What a stored source video decides about its job: an extension's length — `seconds` is the
whole video's (the source's frames and the new ones), `num_frames` the new part's, whose first
frame is the source's last — and an uploaded edit's size. Read from the stored file, its frames
counted once (config/source_video.py caches the count for the resolve that follows)."""

from __future__ import annotations

from ..config import ConfigError
from ..config.source_video import video_frames, video_size
from ..models import latent
from ..models.registry import architecture
from .fields import RequestError, as_number, frames_for, seconds_of


def source_frames(path: str) -> int:
    """The stored source's frame count; 400 for a file that is not a video."""
    try:
        return video_frames(path, "video")
    except ConfigError:
        raise RequestError("video could not be read as a video; upload an mp4", "video") from None


def new_part(served, fields: dict, frames: int) -> dict:
    """The fields with `seconds` (the whole length) turned into the new part's num_frames; a
    num_frames given too wins, as it does for a create."""
    seconds = fields.get("seconds")
    if seconds is None or fields.get("num_frames") is not None:
        return {k: v for k, v in fields.items() if k != "seconds"}
    model = served.base.model
    rate = as_number(fields.get("fps")) if fields.get("fps") is not None else model.fps
    rate = rate if isinstance(rate, int) and not isinstance(rate, bool) and rate > 0 else model.fps
    total = frames_for(seconds, rate)
    vae = architecture(model.architecture).vae
    if total - frames + 1 < 1 + vae.scale_factor_temporal:
        raise RequestError(
            f"seconds={seconds} is the whole video's length, and the video already has "
            f"{seconds_of(frames, rate)} s ({frames} frames); ask for more",
            "seconds",
        )
    rest = {k: v for k, v in fields.items() if k != "seconds"}
    return rest | {"num_frames": latent.frames_at_most(total - frames + 1, vae)}


def upload_size(served, fields: dict, path: str) -> dict:
    """An uploaded edit's size unless the request gives one: the upload's own, each side to the
    nearest multiple the model takes (16 or 32 pixels), as a remix keeps its source job's size."""
    if any(fields.get(key) is not None for key in ("size", "width", "height")):
        return {}
    try:
        width, height = video_size(path)
    except ConfigError:
        raise RequestError("video could not be read as a video; upload an mp4", "video") from None
    m = served.base.model.size_multiple
    return {"width": max(m, m * round(width / m)), "height": max(m, m * round(height / m))}
