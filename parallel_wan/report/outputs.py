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


def save_generation(output_dir: str, videos: list, fps: int, sidecar: dict, save_frames: bool) -> dict:
    """Write the videos (video.mp4, or video_000.mp4 … for a prompt batch), optional raw frames
    and, last, the JSON sidecar — so a sidecar on disk means the job finished. Returns the
    paths written."""
    os.makedirs(output_dir, exist_ok=True)
    many = len(videos) > 1
    entries = []
    for i, frames in enumerate(videos):
        suffix = f"_{i:03d}" if many else ""
        entry = {"video": os.path.join(output_dir, f"video{suffix}.mp4"), "frames_sha256": frames_sha256(frames)}
        if save_frames:
            entry["frames"] = os.path.join(output_dir, f"frames{suffix}.npy")
            write_npy(entry["frames"], frames)
        write_mp4(entry["video"], frames, fps)
        entries.append(entry)
    if many:
        sidecar = {**sidecar, "videos": [{**meta, **e} for meta, e in zip(sidecar.get("videos", [{}] * len(entries)), entries)]}
    else:
        sidecar = {**sidecar, "frames_sha256": entries[0]["frames_sha256"], "files": entries[0]}
    paths = {"sidecar": os.path.join(output_dir, "video.json"), "video": entries[0]["video"],
             "videos": [e["video"] for e in entries]}
    write_json(paths["sidecar"], sidecar)
    return paths
