"""A stand-in first frame for checking the settings of an image-to-video model that has no
image yet: a server's start settings (every request brings its own image) and a memory plan
(planning reads no image: the video's size decides the bytes, not the picture). For Animate the
same for its driving videos, and for S2V its speech: a memory plan reads none (a segment's size
decides the bytes)."""

from __future__ import annotations

import contextlib
import os
import tempfile


@contextlib.contextmanager
def placeholder_image(raw: dict):
    """{"image": a small PNG} while the settings `raw` of an image-to-video model without
    image= are checked; {} otherwise. The file is gone once the block ends: nothing may read it
    later."""
    model = raw.get("model") or {}
    videos = [k for k in ("pose_video", "face_video") if not raw.get(k) and _requires(model, k)]
    audio = not raw.get("audio") and _requires(model, "audio")
    if (raw.get("image") or not _requires_image(model)) and not videos and not audio:
        yield {}
        return
    from PIL import Image

    with tempfile.TemporaryDirectory(prefix="parallel_wan_placeholder_") as folder:
        given = {}
        if not raw.get("image") and _requires_image(raw.get("model") or {}):
            given["image"] = os.path.join(folder, "placeholder.png")
            Image.new("RGB", (16, 16)).save(given["image"])
        for key in videos:  # six black 16² frames: enough for either prev_segment_frames
            import imageio.v3 as iio
            import numpy as np

            given[key] = os.path.join(folder, f"placeholder_{key}.mp4")
            iio.imwrite(given[key], np.zeros((6, 16, 16, 3), np.uint8), fps=30, codec="libx264", macro_block_size=1)
        if audio:  # S2V: a second of speech-like sound (the planner does not read it)
            from ..builtin.s2v_examples import speech, write_wav

            given["audio"] = os.path.join(folder, "placeholder.wav")
            write_wav(given["audio"], speech(1.0))
        yield given


def _requires(model: dict, name: str) -> bool:
    from ..errors import ConfigError
    from .schema import preset_architecture

    try:
        taken = preset_architecture(model).variant.input(name)
        return taken is not None and taken.required
    except ConfigError:
        return False


def _requires_image(model: dict) -> bool:
    from ..errors import ConfigError
    from ..models.variants import IMAGE
    from .schema import preset_architecture

    try:
        image = preset_architecture(model).variant.input(IMAGE)
    except ConfigError:  # resolve() names the unknown architecture
        return False
    return image is not None and image.required
