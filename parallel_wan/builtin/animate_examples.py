"""Example inputs for the built-in tiny Animate model: a character image, a pose video (a stick
figure waving its arms), a face video (a face-like blob turning), and for mode=replace a
background video and a black-and-white mask video of where the figure is. Drawn with numpy
from the frame index alone, so they are the same on every machine; written as PNG and mp4s
the way users' inputs come. Used when `model=tiny_animate` is run with no inputs, and by the
tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

FPS = 30


def _disc(yy, xx, cy, cx, r):
    return (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r


def _segment(yy, xx, a, b, width):
    """Pixels within `width` of the segment a–b ((y, x) pairs)."""
    (ay, ax), (by, bx) = a, b
    dy, dx = by - ay, bx - ax
    t = np.clip(((yy - ay) * dy + (xx - ax) * dx) / max(dy * dy + dx * dx, 1e-9), 0.0, 1.0)
    return (yy - ay - t * dy) ** 2 + (xx - ax - t * dx) ** 2 <= width * width


def figure(frame: int, height: int, width: int) -> np.ndarray:
    """(H, W) bool: a stick figure whose arms wave with the frame index."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    cx, s = width / 2 + 0.08 * width * np.sin(frame / 6.0), min(height, width) / 64.0
    neck, hip = (0.32 * height, cx), (0.62 * height, cx)
    swing = 0.9 * np.sin(frame / 3.0)
    arm = 14 * s
    shape = _disc(yy, xx, 0.22 * height, cx, 7 * s) | _segment(yy, xx, neck, hip, 2.5 * s)
    for side in (-1, 1):
        hand = (neck[0] + arm * np.sin(swing * side), neck[1] + side * arm * np.cos(swing))
        foot = (0.9 * height, cx + side * 10 * s)
        shape |= _segment(yy, xx, neck, hand, 2.0 * s) | _segment(yy, xx, hip, foot, 2.5 * s)
    return shape


def pose_frame(frame: int, height: int, width: int) -> np.ndarray:
    """A pose video's frame as pose renderers draw them: coloured limbs on black."""
    rgb = np.zeros((height, width, 3), np.uint8)
    rgb[figure(frame, height, width)] = (255, 170, 40)
    return rgb


def face_frame(frame: int, size: int) -> np.ndarray:
    """A face crop: a skin-toned oval with eyes and a mouth that move with the frame index."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    turn = 0.06 * np.sin(frame / 4.0)
    rgb = np.full((size, size, 3), 40, np.uint8)
    rgb[((yy - 0.5) / 0.42) ** 2 + ((xx - 0.5) / 0.34) ** 2 <= 1] = (225, 180, 150)
    for ex in (0.38, 0.62):
        rgb[_disc(yy, xx, 0.42, ex + turn, 0.05)] = (30, 30, 30)
    mouth = 0.02 + 0.03 * (1 + np.sin(frame / 2.0))
    rgb[(np.abs(yy - 0.7) <= mouth) & (np.abs(xx - 0.5 - turn) <= 0.12)] = (150, 40, 40)
    return rgb


def background_frame(frame: int, height: int, width: int) -> np.ndarray:
    """A scene with the figure standing in it (what replace mode puts the character into)."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    rgb = np.stack(
        [90 + 60 * np.sin((xx + 2 * frame) / 11.0), 120 + 50 * np.cos(yy / 9.0), 150 + 0 * xx], axis=-1
    ).astype(np.uint8)
    rgb[figure(frame, height, width)] = (200, 60, 60)
    return rgb


def mask_frame(frame: int, height: int, width: int) -> np.ndarray:
    """White where the figure is (grown by a few pixels, as mask tools do), black elsewhere."""
    shape = figure(frame, height, width)
    grown = shape.copy()
    for dy in (-2, 0, 2):
        for dx in (-2, 0, 2):
            grown |= np.roll(np.roll(shape, dy, axis=0), dx, axis=1)
    return np.repeat((grown * 255).astype(np.uint8)[..., None], 3, axis=-1)


def character(height: int, width: int) -> np.ndarray:
    """The character image: a smooth picture of a figure on a light background."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    rgb = np.stack([200 + 30 * np.sin(xx / 7.0), 210 + 20 * np.cos(yy / 5.0), 230 + 0 * xx], axis=-1)
    rgb[figure(0, height, width)] = (60, 90, 200)
    return rgb.astype(np.uint8)


def write_examples(folder, frames: int, height: int, width: int, face_size: int) -> dict[str, str]:
    """Write every example input into `folder`; {setting: path}. The character image is wider
    than the video, so its letterboxing is exercised."""
    import imageio.v3 as iio
    from PIL import Image

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {
        "image": folder / "character.png",
        "pose_video": folder / "pose.mp4",
        "face_video": folder / "face.mp4",
        "background_video": folder / "background.mp4",
        "mask_video": folder / "mask.mp4",
    }
    Image.fromarray(character(height, width + width // 4)).save(paths["image"])
    videos = {
        "pose_video": [pose_frame(f, height, width) for f in range(frames)],
        "face_video": [face_frame(f, face_size) for f in range(frames)],
        "background_video": [background_frame(f, height, width) for f in range(frames)],
        "mask_video": [mask_frame(f, height, width) for f in range(frames)],
    }
    for key, video in videos.items():
        iio.imwrite(paths[key], np.stack(video), fps=FPS, codec="libx264", macro_block_size=1)
    return {k: str(v) for k, v in paths.items()}


EXAMPLE_FRAMES, EXAMPLE_SIZE = 21, 64  # three 9-frame segments of the tiny preset, 64 × 64 driving videos


def stored_examples(face_size: int) -> dict[str, str]:
    """The example inputs, written once per machine under the cache home (builtin/stored.py);
    {setting: path}."""
    import hashlib

    from parallel_wan.builtin.stored import stored_inputs

    key = hashlib.sha256(Path(__file__).read_bytes() + f"{face_size}".encode()).hexdigest()[:16]
    folder = stored_inputs(
        "animate_examples", key, lambda f: write_examples(f, EXAMPLE_FRAMES, EXAMPLE_SIZE, EXAMPLE_SIZE, face_size)
    )
    names = ("character.png", "pose.mp4", "face.mp4", "background.mp4", "mask.mp4")
    settings = ("image", "pose_video", "face_video", "background_video", "mask_video")
    return {k: str(folder / n) for k, n in zip(settings, names)}
