"""video= and strength=: video-to-video (a remix, an edit) — the source video's frames encoded by
the VAE, noised to `strength` and denoised with the prompt, as diffusers' WanVideoToVideoPipeline
does: strength 1 starts from pure noise (the source is not seen), 0.5 runs the last half of the
steps from the source noised halfway. Read here only far enough to check it: the file is a
video, how many frames it has, and that the run can use it."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping

from ..errors import ConfigError
from ..models.registry import architecture
from ..models.variants import IMAGE
from .schema import _as

DEFAULT_STRENGTH = 0.8  # diffusers' WanVideoToVideoPipeline's


def video_frames(path: str, setting: str = "video") -> int:
    """The number of frames of the video at `path`; ConfigError for a file that is not one.
    Counted by ffmpeg (no frame comes into Python) once per process and file version: a server
    counts a source when the request comes and again when it resolves the job's settings."""
    try:
        st = os.stat(path)
        return _counted(os.path.abspath(path), st.st_size, st.st_mtime_ns)
    except Exception as exc:  # ffmpeg fails in many ways on a bad file
        raise ConfigError(
            f"{setting}={path} could not be read as a video ({type(exc).__name__}); give an mp4 (or another "
            "video ffmpeg reads)",
            setting=setting,
        ) from None


@functools.lru_cache(maxsize=64)
def _counted(path: str, size: int, mtime_ns: int) -> int:
    import imageio_ffmpeg

    frames, _ = imageio_ffmpeg.count_frames_and_secs(path)
    if not frames:
        raise ValueError("no frames")
    return frames


def video_size(path: str, setting: str = "video") -> tuple[int, int]:
    """(width, height) of the video at `path`, from its header; ConfigError for a file that is
    not a video."""
    import imageio.v3 as iio

    try:
        width, height = iio.immeta(path, plugin="FFMPEG")["size"]
        return int(width), int(height)
    except Exception as exc:
        raise ConfigError(
            f"{setting}={path} could not be read as a video ({type(exc).__name__}); give an mp4", setting=setting
        ) from None


def extension(cfg: Mapping, model, image: str | None) -> tuple[str | None, int | None]:
    """extend=: (the video to continue, its frame count) — (None, None) without one. Its last frame
    is the first frame of an image-to-video run, whose frames follow the source's in the output."""
    path = cfg.get("extend")
    if not path:
        return None, None
    path = _as(str, "extend", path)
    if not os.path.isfile(path):
        raise ConfigError(f"extend={path} does not exist; give the path of the mp4 to continue", setting="extend")
    if architecture(model.architecture).variant.input(IMAGE) is None:
        raise ConfigError(
            f"extend={path} continues a video from its last frame with an image-to-video model (I2V-A14B, TI2V-5B; "
            f"model=tiny_i2v or tiny_ti2v here); model={model.name} is text-to-video",
            setting=("extend", "model"),
        )
    if image is not None or cfg.get("video"):
        raise ConfigError(
            f"extend={path} starts from its last frame; give one of extend=, image= and video=",
            setting=("extend", "image" if image is not None else "video"),
        )
    return path, video_frames(path, "extend")


def source_video(cfg: Mapping, model, image: str | None) -> tuple[str | None, float, int | None]:
    """(the source video's path, strength, its frame count) — (None, strength, None) without one."""
    strength = _as(float, "strength", cfg.get("strength", DEFAULT_STRENGTH))
    path = cfg.get("video")
    if not path:
        return None, strength, None
    path = _as(str, "video", path)
    if not os.path.isfile(path):
        raise ConfigError(f"video={path} does not exist; give the path of an mp4", setting="video")
    if not 0.0 < strength <= 1.0:
        raise ConfigError(
            f"strength={strength} must be above 0 and at most 1 (how much of the schedule runs from the source "
            f"video noised to it; {DEFAULT_STRENGTH} by default)",
            setting="strength",
        )
    if (cfg.get("cache") or {}).get("calibrate"):  # a curve is measured over a whole run, from step 0
        raise ConfigError(
            f"video={path} runs only the last part of the schedule, and cache.calibrate=true measures a MagCache "
            "curve over a whole run; calibrate without video= (then use the curve with it)",
            setting=("video", "cache"),
        )
    return path, strength, video_frames(path, "video")


def refuse_source_videos(spec, made_from: str) -> None:
    """A variant that makes its video from inputs of its own (Animate: `made_from` "its driving
    videos"; S2V) is not continued or re-noised from another video: video= and extend= (a
    server's remix, edit or extension) are refused in one line, not ignored."""
    for key, kind in (("video", "video-to-video"), ("extend", "a video's continuation")):
        if getattr(spec.video, key) is not None:
            raise ConfigError(
                f"model={spec.model.name} makes its video from {made_from}; {key}= ({kind}) is a run of the "
                f"text/image-to-video models; drop {key}=",
                setting=key,
            )
