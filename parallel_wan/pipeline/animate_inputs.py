"""Animate-14B's inputs on the host, prepared as diffusers' WanAnimatePipeline prepares them:

- the character image, for the VAE: scaled bilinearly to fit height × width with its aspect
  kept and centred on black (diffusers' WanAnimateImageProcessor, resize_mode="fill"); for CLIP:
  as given (image/clip.py);
- the pose and background videos: each frame resized (PIL Lanczos) to exactly height × width,
  x/255·2 − 1 (VideoProcessor.preprocess_video); the face video: to the motion encoder's square
  size; the mask video: resized, then grey, x/255 in [0, 1] (its mask processor: no normalising);
- every driving video walked back and forth to the segments' padded length
  (models/animate_segments.padded_indices).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..models.animate_segments import padded_indices
from ..report.outputs import file_sha256


def reference_image(path: str, height: int, width: int):
    """(the letterboxed image (1, 3, H, W) in [-1, 1], the image as given (PIL, RGB), a record)."""
    from PIL import Image

    with Image.open(path) as im:
        original = im.convert("RGB")
    src_ratio, ratio = original.width / original.height, width / height
    fit_w = width if ratio < src_ratio else original.width * height // original.height
    fit_h = height if ratio >= src_ratio else original.height * width // original.width
    canvas = Image.new("RGB", (width, height), color=0)
    canvas.paste(
        original.resize((fit_w, fit_h), resample=Image.BILINEAR),
        box=(width // 2 - fit_w // 2, height // 2 - fit_h // 2),
    )
    pixels = np.asarray(canvas, dtype=np.float32) / 255.0
    record = {
        "path": os.path.abspath(path),
        "sha256": file_sha256(path),
        "size": list(original.size),
        "fitted_to": [width, height],
    }
    return (pixels * 2.0 - 1.0).transpose(2, 0, 1)[None], original, record


@dataclass(frozen=True)
class DrivingVideo:
    """A driving video's frames as read and resized, kept as uint8 (a quarter of the floats:
    a 900-frame 720p pose video is 2.5 GB, not 10, on every process), and the padded walk over
    them; a segment's window becomes floats when it is used."""

    frames: np.ndarray  # (F, H, W, C) uint8: C = 3, or 1 for a mask (grey)
    indices: tuple[int, ...]  # the padded frames' indices into `frames`
    mask: bool

    def window(self, start: int, stop: int) -> np.ndarray:
        """(1, C, stop − start, H, W) float32 of padded frames [start, stop): [-1, 1], or [0, 1]
        for a mask (x/255·2 − 1, x/255: diffusers' video processors)."""
        chosen = self.frames[list(self.indices[start:stop])].astype(np.float32) / 255.0
        if not self.mask:
            chosen = chosen * 2.0 - 1.0
        return np.ascontiguousarray(chosen.transpose(3, 0, 1, 2)[None])


def driving_video(path: str, height: int, width: int, padded: int, mask: bool = False):
    """(the video's frames resized, walked to `padded` frames, as a DrivingVideo; a record for the
    sidecar)."""
    import imageio.v3 as iio
    from PIL import Image

    frames = []
    for frame in iio.imiter(path, plugin="FFMPEG"):
        image = Image.fromarray(np.asarray(frame)[..., :3]).convert("RGB")
        size = image.size
        image = image.resize((width, height), resample=Image.LANCZOS)
        frames.append(np.asarray(image.convert("L"))[..., None] if mask else np.asarray(image))
    video = DrivingVideo(np.stack(frames), tuple(padded_indices(len(frames), padded)), mask)
    record = {"path": os.path.abspath(path), "sha256": file_sha256(path), "frames": len(frames), "size": list(size)}
    return video, record
