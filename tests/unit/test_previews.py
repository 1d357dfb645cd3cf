"""OpenAI's content variants as images (report/previews.py): the thumbnail is the first frame,
the spritesheet frames evenly spaced in a grid, and a running job's preview the false-colour
projection of its predicted clean latents — which shows where in the video what is."""

import io

import numpy as np
from PIL import Image

from parallel_wan.report.previews import latent_preview, spritesheet, thumbnail


def _frames(count=9, height=48, width=80):
    frames = np.zeros((count, height, width, 3), np.uint8)
    for t in range(count):
        frames[t, :, :, 0] = 7 * t  # red grows frame by frame
        frames[t, :, : width // 2, 2] = 200  # a blue left half
    return frames


def test_the_thumbnail_is_the_first_frame_as_webp():
    frames = _frames()
    image = Image.open(io.BytesIO(thumbnail(frames)))
    assert image.format == "WEBP" and image.size == (80, 48)
    pixels = np.asarray(image.convert("RGB")).astype(int)
    assert np.abs(pixels - frames[0]).mean() <= 2  # WebP at quality 90 (its chroma blurs the sharp edge)


def test_the_spritesheet_spaces_frames_evenly_in_a_grid_of_four():
    frames = _frames(count=33, width=512, height=256)
    sheet = Image.open(io.BytesIO(spritesheet(frames)))
    assert sheet.format == "JPEG" and sheet.size == (4 * 256, 4 * 128)  # 16 frames, each 256 wide
    tiles = np.asarray(sheet).astype(int).reshape(4, 128, 4, 256, 3)
    reds = [tiles[n // 4, 64, n % 4, 200, 0] for n in range(16)]  # the right half: red only
    expected = [7 * round(t) for t in np.linspace(0, 32, 16)]
    assert np.abs(np.array(reds) - np.array(expected)).max() <= 12, reds
    small = Image.open(io.BytesIO(spritesheet(_frames(count=5))))
    assert small.size == (4 * 80, 2 * 48)  # 5 frames: two rows of four, the frames at their size


def test_the_latent_preview_shows_where_the_latents_differ():
    """Latents whose left half leans one way in channel space and right half the other come out
    as two colours split at the middle (the noise beside it stays faint), enlarged to the video's
    size; the projection is the same for any scale of the latents."""
    rng = np.random.default_rng(0)
    direction = rng.standard_normal(16)
    x0 = 0.05 * rng.standard_normal((16, 3, 6, 10))
    x0[:, :, :, :5] += direction[:, None, None, None]
    x0[:, :, :, 5:] -= direction[:, None, None, None]
    frames = latent_preview(x0, 48, 80)
    assert frames.shape == (3, 48, 80, 3) and frames.dtype == np.uint8
    left, right = frames[:, :, :40].astype(int), frames[:, :, 40:].astype(int)
    assert np.abs(left.mean(axis=(0, 1, 2)) - right.mean(axis=(0, 1, 2))).max() > 150
    assert (np.abs(left - left[0, 0, 0]).max(), np.abs(right - right[0, 0, 0]).max()) <= (60, 60)
    assert np.array_equal(latent_preview(3.0 * x0, 48, 80), frames)
