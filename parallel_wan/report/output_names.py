"""The names of a generation's files in its output folder, in one place (outputs.py writes them;
jobs/ finds, verifies and replaces them; the server serves and deletes them):

    STEM.mp4                    the video (STEM_000.mp4, STEM_001.mp4 … for a batch of prompts)
    STEM.frames.npy             save_frames=true's raw uint8 frames (frames.npy for a single
                                run's STEM "video"; _000 … likewise)
    STEM.json                   the sidecar, written last: on disk means finished

STEM is `video` for a single run, an entry's name in a job, a request's id in a server.
"""

from __future__ import annotations

SINGLE_STEM = "video"
ANY_INDEX = "[0-9][0-9][0-9]"  # a glob for any batch index


def video_name(stem: str, index: int | str | None = None) -> str:
    """`index`: the prompt's in a batch (None: one video; ANY_INDEX: a glob for every one)."""
    return f"{stem}{_suffix(index)}.mp4"


def frames_name(stem: str, index: int | str | None = None) -> str:
    frames = "frames" if stem == SINGLE_STEM else f"{stem}.frames"
    return f"{frames}{_suffix(index)}.npy"


def sidecar_name(stem: str) -> str:
    return f"{stem}.json"


def video_patterns(stem: str) -> tuple[str, ...]:
    """Globs of every video and frames file a generation of `stem` may have written."""
    return (video_name(stem), video_name(stem, ANY_INDEX), frames_name(stem), frames_name(stem, ANY_INDEX))


def one_video_names(stem: str) -> tuple[str, ...]:
    """The files of a generation of one video: the mp4, its sidecar, its frames."""
    return (video_name(stem), sidecar_name(stem), frames_name(stem))


def _suffix(index: int | str | None) -> str:
    if index is None:
        return ""
    return f"_{index:03d}" if isinstance(index, int) else f"_{index}"
