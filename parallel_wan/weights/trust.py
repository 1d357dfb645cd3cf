"""A checkpoint folder is untrusted input: the paths it names must stay inside it.

Two ways a folder could make the loader read elsewhere: a `*.safetensors.index.json` whose
weight map names `../../x.safetensors` or `/abs/x.safetensors`, and a symlink (a file or a
folder) that leads out. Both are refused, by name, before anything is opened. One exception is
allowed, because it is how huggingface_hub stores every download: files of
`…/models--org--name/snapshots/<rev>/` are symlinks into `…/models--org--name/blobs/`.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath


def allowed_roots(folder: str | Path) -> list[Path]:
    """Where files of `folder` may resolve to: the folder itself and, inside a Hugging Face
    cache snapshot, that repository's blobs/."""
    folder = Path(folder).absolute()
    roots = [folder.resolve()]
    for parent in (folder, *folder.parents):
        if parent.parent.name == "snapshots" and (parent.parent.parent / "blobs").is_dir():
            roots.append((parent.parent.parent / "blobs").resolve())
            break
    return roots


def _within(path: Path, roots: list[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def listed_file(folder: Path, name, listed_in: str, roots: list[Path] | None = None) -> Path:
    """`folder / name` for a file name read from a file of the checkpoint (an index's weight
    map), refused unless it is a relative path that stays inside `folder` after symlinks.
    `roots`: `allowed_roots(folder)`, when the caller checks many names of one folder."""
    where = f"{folder / listed_in}"
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where} names {name!r} as a file; expected a file name inside {folder}")
    relative = PurePosixPath(name)
    if relative.is_absolute() or ".." in relative.parts or "\\" in name:
        raise ValueError(
            f"{where} names {name!r}, a path leading outside {folder}; a checkpoint may only name "
            "files inside its folder (re-download that index)"
        )
    path = folder / relative
    if not _within(path.resolve(), roots if roots is not None else allowed_roots(folder)):
        raise ValueError(
            f"{where} names {name!r}, which is a symlink to {path.resolve()}, outside {folder}; "
            "copy the file into the checkpoint folder instead of linking it"
        )
    return path


def check_links(root: str | Path) -> None:
    """Every symlink under `root` (files and folders, not followed) resolves inside it (or the
    Hugging Face blobs/ beside its snapshot). Raises ValueError naming the first one that does not."""
    root = Path(root)
    roots = allowed_roots(root)
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            if path.is_symlink() and not _within(path.resolve(), roots):
                raise ValueError(
                    f"{path} is a symlink to {path.resolve()}, outside the checkpoint folder {root}; "
                    "a checkpoint's files must lie inside it (copy the file in instead of linking it)"
                )
