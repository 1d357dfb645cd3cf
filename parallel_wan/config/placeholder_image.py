"""A stand-in first frame for checking the settings of an image-to-video model that has no
image yet: a server's start settings (every request brings its own image) and a memory plan
(planning reads no image: the video's size decides the bytes, not the picture)."""

from __future__ import annotations

import contextlib
import os
import tempfile


@contextlib.contextmanager
def placeholder_image(raw: dict):
    """{"image": a small PNG} while the settings `raw` of an image-to-video model without
    image= are checked; {} otherwise. The file is gone once the block ends: nothing may read it
    later."""
    if raw.get("image") or not _requires_image(raw.get("model") or {}):
        yield {}
        return
    from PIL import Image

    with tempfile.TemporaryDirectory(prefix="parallel_wan_placeholder_") as folder:
        path = os.path.join(folder, "placeholder.png")
        Image.new("RGB", (16, 16)).save(path)
        yield {"image": path}


def _requires_image(model: dict) -> bool:
    from ..errors import ConfigError
    from ..models.variants import IMAGE
    from .schema import preset_architecture

    try:
        image = preset_architecture(model).variant.input(IMAGE)
    except ConfigError:  # resolve() names the unknown architecture
        return False
    return image is not None and image.required
