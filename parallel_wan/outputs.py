"""Writing a finished generation: mp4, JSON sidecar and optional raw frames, each atomically
(written under a temporary name in the same folder, then renamed), so a crash never leaves a
half-written file under the final name."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile

import numpy as np


def frames_sha256(frames: np.ndarray) -> str:
    """sha256 of the uint8 frames (T, H, W, 3), C order: identical videos ⇔ identical hashes."""
    return hashlib.sha256(np.ascontiguousarray(frames).tobytes()).hexdigest()


def _atomic_path(final: str) -> str:
    folder, base = os.path.split(final)
    stem, ext = os.path.splitext(base)
    fd, tmp = tempfile.mkstemp(prefix=f".{stem}.", suffix=f".partial{ext}", dir=folder)
    os.close(fd)
    return tmp


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(final: str, write) -> None:
    tmp = _atomic_path(final)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file ordinary permissions
        os.replace(tmp, final)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_mp4(path: str, frames: np.ndarray, fps: int) -> None:
    import imageio.v2 as imageio

    def write(tmp):
        # yuv420p needs even sizes; every supported size is a multiple of 16, so it is.
        imageio.mimwrite(tmp, list(frames), fps=fps, format="FFMPEG", codec="libx264", quality=8,
                         pixelformat="yuv420p", macro_block_size=1, output_params=["-loglevel", "error"])

    write_atomic(path, write)


def write_json(path: str, payload: dict) -> None:
    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(payload, f, indent=2, default=str)
            f.write("\n")

    write_atomic(path, write)


def write_npy(path: str, array: np.ndarray) -> None:
    def write(tmp):
        with open(tmp, "wb") as f:
            np.save(f, array)

    write_atomic(path, write)


def save_generation(output_dir: str, frames: np.ndarray, fps: int, sidecar: dict, save_frames: bool) -> dict:
    """Write video.mp4, video.json (+ frames.npy); returns the paths written."""
    os.makedirs(output_dir, exist_ok=True)
    paths = {"video": os.path.join(output_dir, "video.mp4"), "sidecar": os.path.join(output_dir, "video.json")}
    if save_frames:
        paths["frames"] = os.path.join(output_dir, "frames.npy")
        write_npy(paths["frames"], frames)
    write_mp4(paths["video"], frames, fps)
    write_json(paths["sidecar"], {**sidecar, "frames_sha256": frames_sha256(frames), "files": paths})
    return paths
