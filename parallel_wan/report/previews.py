"""A video's still images, as OpenAI's Videos API offers them beside the mp4
(`GET …/content?variant=`): a `thumbnail` (one frame, WebP) and a `spritesheet` (frames evenly
spaced, in a grid, JPEG) — from the video's frames once it is made, and while it is made from the
latest step's latents through a cheap projection (`latent_preview`).

The projection is a false-colour view, not the video's colours: the predicted clean latents
x̂₀ = x_t − σ_t·v (flow matching; the step's own prediction), each latent pixel's channels mapped
to RGB by their first three principal components over the whole video (each component's sign
fixed by its largest channel weight; all three on the first one's scale, its 99th percentile at
the ends of 0–255, so a weak component stays near grey), at latent resolution, enlarged to the
video's size. It needs no decoder and no model-specific
colour table, costs one gather and a small SVD, and shows the layout and motion as they form.
"""

from __future__ import annotations

import io

import numpy as np

THUMBNAIL = ("webp", "image/webp")
SPRITESHEET = ("jpg", "image/jpeg")
SPRITE_COLUMNS, SPRITES = 4, 16  # at most 16 frames, 4 to a row
SPRITE_WIDTH = 256  # pixels per frame in the sheet, at most


def thumbnail(frames: np.ndarray) -> bytes:
    """The first frame (uint8 T×H×W×3) as WebP."""
    return _encode(frames[0], "WEBP", quality=90)


def spritesheet(frames: np.ndarray) -> bytes:
    """Up to SPRITES frames evenly spaced from first to last, SPRITE_COLUMNS to a row, each at
    most SPRITE_WIDTH wide, as JPEG."""
    from PIL import Image

    count = min(SPRITES, len(frames))
    picks = np.unique(np.linspace(0, len(frames) - 1, count).round().astype(int))
    height, width = frames.shape[1:3]
    scale = min(1.0, SPRITE_WIDTH / width)
    tile = (max(1, round(width * scale)), max(1, round(height * scale)))
    columns = min(SPRITE_COLUMNS, len(picks))
    rows = -(-len(picks) // columns)
    sheet = Image.new("RGB", (tile[0] * columns, tile[1] * rows))
    for n, index in enumerate(picks):
        image = Image.fromarray(frames[index]).resize(tile, Image.BILINEAR)
        sheet.paste(image, ((n % columns) * tile[0], (n // columns) * tile[1]))
    return _encode(np.asarray(sheet), "JPEG", quality=85)


def latent_preview(x0: np.ndarray, height: int, width: int) -> np.ndarray:
    """uint8 frames (T'×height×width×3) of one video's predicted clean latents (C×T'×h×w):
    the false-colour projection described above."""
    channels = x0.shape[0]
    pixels = x0.reshape(channels, -1).T.astype(np.float64)  # (T'·h·w, C)
    pixels = pixels - pixels.mean(axis=0)
    _, _, vt = np.linalg.svd(pixels, full_matrices=False)
    axes = vt[:3] * np.sign(vt[:3][np.arange(min(3, len(vt))), np.abs(vt[:3]).argmax(axis=1)])[:, None]
    parts = pixels @ axes.T  # (N, ≤3), each component's largest channel weight positive (a fixed sign)
    # one scale for all three (the first component's spread): a weak component stays near grey
    # instead of stretching its noise over the whole range
    scale = max(float(np.percentile(np.abs(parts[:, 0]), 99)), 1e-12)
    rgb = np.clip(0.5 + 0.5 * parts / scale, 0.0, 1.0)
    if rgb.shape[1] < 3:  # fewer than 3 channels: repeat the last component
        rgb = np.concatenate([rgb, np.repeat(rgb[:, -1:], 3 - rgb.shape[1], axis=1)], axis=1)
    small = (rgb * 255.0 + 0.5).astype(np.uint8).reshape(*x0.shape[1:], 3)  # (T', h, w, 3)
    rows = np.arange(height) * small.shape[1] // height  # nearest: the latent pixels as blocks
    cols = np.arange(width) * small.shape[2] // width
    return small[:, rows][:, :, cols]


def _encode(pixels: np.ndarray, kind: str, **options) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels)).save(buffer, format=kind, **options)
    return buffer.getvalue()
