"""Images for I2V/TI2V runs: smooth, deterministic pictures (resizing pure noise would be all ringing)."""

import numpy as np


def write_png(path, width, height):
    """A smooth, deterministic RGB picture (Lanczos resizing of pure noise would be all ringing)."""
    from PIL import Image

    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    rgb = np.stack([xx / width, yy / height, 0.5 + 0.5 * np.sin(xx / 5.0) * np.cos(yy / 7.0)], axis=-1)
    Image.fromarray(np.round(rgb * 255.0).astype(np.uint8)).save(path)
    return str(path)
