"""Writing a finished generation: mp4, JSON sidecar and optional raw frames, each atomically
(written under a temporary name in the same folder, then renamed), so a crash never leaves a
half-written file under the final name."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile

import numpy as np

from .output_names import frames_name, sidecar_name, video_name


def frames_sha256(frames: np.ndarray) -> str:
    """sha256 of the uint8 frames (T, H, W, 3), C order: identical videos ⇔ identical hashes."""
    return hashlib.sha256(np.ascontiguousarray(frames).tobytes()).hexdigest()


def file_sha256(path: str) -> str:
    """sha256 of a file's bytes, read in 4 MB blocks (a video's checksum in its sidecar)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


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


def stage(final: str, write) -> str:
    """Write a file for `final` under a temporary name beside it and return that name; a write
    that fails (a full disk, Ctrl-C) removes its temporary file and re-raises."""
    tmp = _atomic_path(final)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file ordinary permissions
    except OSError as exc:
        # numpy reports a short write without an errno ("N requested and M written"): with the
        # disk left without room (looked at before the partial file goes), it is ENOSPC
        full = exc.errno is None and _no_room(tmp)
        _remove(tmp)
        if full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), final) from exc
        raise
    except BaseException:
        _remove(tmp)
        raise
    return tmp


def _no_room(path: str) -> bool:
    try:
        return os.statvfs(os.path.dirname(path) or ".").f_bavail == 0
    except OSError:
        return False


def commit(staged: list[tuple[str, str]]) -> None:
    """Rename staged (temporary, final) pairs in order. Renames within a folder need no space;
    should one still fail, the files already renamed are removed too: all or nothing."""
    done = []
    try:
        for tmp, final in staged:
            os.replace(tmp, final)
            done.append(final)
    except BaseException:
        discard(staged)
        for final in done:
            _remove(final)
        raise


def discard(staged: list[tuple[str, str]]) -> None:
    for tmp, _ in staged:
        _remove(tmp)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def write_atomic(final: str, write) -> None:
    commit([(stage(final, write), final)])


def _mp4_writer(frames: np.ndarray, fps: int, audio: str | None = None):
    def write(tmp):
        if audio is not None:  # S2V: the speech muxed in after the frames are written
            silent = stage(tmp, _mp4_writer(frames, fps))
            try:
                _mux_audio(silent, audio, tmp)
            finally:
                _remove(silent)
            return
        import imageio.v2 as imageio

        # yuv420p needs even sizes; every supported size is a multiple of 16, so it is.
        imageio.mimwrite(
            tmp,
            list(frames),
            fps=fps,
            format="FFMPEG",
            codec="libx264",
            quality=8,
            pixelformat="yuv420p",
            macro_block_size=1,
            output_params=["-loglevel", "error"],
        )
        _check_mp4(tmp, len(frames), fps)

    return write


def _mux_audio(video: str, audio: str, out: str) -> None:
    """The video stream copied and the audio encoded AAC at 192 kb/s, cut to the shorter of the
    two — the official S2V `merge_video_audio`'s command, by the ffmpeg imageio-ffmpeg ships."""
    import subprocess

    import imageio_ffmpeg

    cmd = [imageio_ffmpeg.get_ffmpeg_exe(), "-nostdin", "-v", "error", "-y", "-i", video, "-i", audio]
    cmd += [
        "-c:v",
        "copy",
        "-c:a",
        "aac",
        "-b:a",
        "192k",
        "-map",
        "0:v:0",
        "-map",
        "1:a:0",
        "-shortest",
        "-f",
        "mp4",
        out,
    ]
    done = subprocess.run(cmd, capture_output=True, check=False)
    if done.returncode != 0:
        raise OSError(
            errno.EIO, f"ffmpeg could not add the audio track: {done.stderr.decode(errors='replace').strip()}", out
        )


def _check_mp4(path: str, frames: int, fps: int) -> None:
    """imageio does not read ffmpeg's exit status: a full disk leaves a truncated file and no
    error. ffmpeg writes the mp4's index (moov) last, so a file whose header reads back with the
    whole duration was written whole (a header read: no frame is decoded)."""
    import imageio.v3 as iio

    try:
        duration = float(iio.immeta(path, plugin="FFMPEG")["duration"])
    except Exception:  # ffmpeg cannot read it: its end is missing
        duration = -1.0
    if abs(duration - frames / fps) > 1.5 / fps:
        if _no_room(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        raise OSError(errno.EIO, f"ffmpeg wrote an incomplete mp4 ({duration:.2f} of {frames / fps:.2f} s)", path)


def _json_writer(payload, indent: int | None = 2):
    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(payload, f, indent=indent, default=str)
            f.write("\n")

    return write


def _npy_writer(array: np.ndarray):
    def write(tmp):
        with open(tmp, "wb") as f:
            np.save(f, array)

    return write


def write_json(path: str | os.PathLike, payload, indent: int | None = 2) -> None:
    """`payload` as JSON and a newline at `path`, atomically: the one JSON writer (a job's
    record, the sidecar's format; the preemption marker; a calibrated MagCache curve, compact)."""
    write_atomic(str(path), _json_writer(payload, indent))


def save_generation(
    output_dir: str,
    videos: list,
    fps: int,
    sidecar: dict,
    save_frames: bool,
    stem: str = "video",
    audio: str | None = None,
) -> dict:
    """Write the videos (STEM.mp4, or STEM_000.mp4 … for a prompt batch), optional raw frames
    and, last, the JSON sidecar STEM.json (output_names.py) — so a sidecar on disk means the job
    finished. `audio`: a file whose audio track every mp4 carries (S2V's speech). Each
    video's record holds the sha256 of its uint8 frames and of the mp4 file's bytes (a re-run
    checks the latter: jobs/resume.py). Returns the paths written.

    All or nothing: every file is written under a temporary name first and renamed only when
    all are written; a failure (ENOSPC, an I/O error, Ctrl-C) removes the temporary files —
    and the output folder, when this call made it and it is empty — and re-raises."""
    made = not os.path.isdir(output_dir)
    os.makedirs(output_dir, exist_ok=True)
    many = len(videos) > 1
    entries, staged = [], []
    try:
        for i, frames in enumerate(videos):
            index = i if many else None
            entry = {"video": os.path.join(output_dir, video_name(stem, index)), "frames_sha256": frames_sha256(frames)}
            if save_frames:
                entry["frames"] = os.path.join(output_dir, frames_name(stem, index))
                staged.append((stage(entry["frames"], _npy_writer(frames)), entry["frames"]))
            staged.append((stage(entry["video"], _mp4_writer(frames, fps, audio)), entry["video"]))
            entry["mp4_sha256"] = file_sha256(staged[-1][0])
            entries.append(entry)
        if many:
            sidecar = {
                **sidecar,
                "videos": [{**meta, **e} for meta, e in zip(sidecar.get("videos", [{}] * len(entries)), entries)],
            }
        else:
            sidecar = {
                **sidecar,
                "frames_sha256": entries[0]["frames_sha256"],
                "mp4_sha256": entries[0]["mp4_sha256"],
                "files": entries[0],
            }
        paths = {
            "sidecar": os.path.join(output_dir, sidecar_name(stem)),
            "video": entries[0]["video"],
            "videos": [e["video"] for e in entries],
        }
        staged.append((stage(paths["sidecar"], _json_writer(sidecar)), paths["sidecar"]))
        commit(staged)
    except BaseException:
        discard(staged)
        if made:
            try:
                os.rmdir(output_dir)
            except OSError:  # not empty: something else writes there too
                pass
        raise
    return paths
