"""A source video for video-to-video tests (video=, a server's remix and edits)."""

import numpy as np


def write_source_video(path, frames=9, height=64, width=64):
    """A smooth moving pattern written as an mp4; returns its frames as a reader decodes them
    (what the run reads: the codec's frames, not the pattern)."""
    import imageio.v3 as iio

    t, y, x = np.meshgrid(np.arange(frames), np.arange(height), np.arange(width), indexing="ij")
    video = np.stack(
        [128 + 100 * np.sin((x + 3 * t) / 9.0), 128 + 100 * np.cos((y - 2 * t) / 7.0), 60 + 6 * t + 0 * x], axis=-1
    ).astype(np.uint8)
    iio.imwrite(path, video, fps=16, codec="libx264")
    return np.stack(list(iio.imiter(path)))
