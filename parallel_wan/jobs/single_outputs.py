"""A command-line run (no `prompts=`) given `output_dir=` that already holds a video.

The folder is the user's, and a finished video in it is work that cost GPU hours: a run never
replaces it silently. What the folder holds decides, before anything loads:

- `video.json` of other settings (the sidecar's result key differs): refused, naming the
  settings that differ (keys.differences) — keep that video by choosing another output_dir, or
  delete its files to replace it. A sidecar too old to record its settings is refused the same way.
- `video.json` of these settings with its mp4 intact: that video is this run's video; nothing
  runs (a prompt-file job's re-run skips its finished entries the same way). With
  `save_frames=true` and no frames file beside it, it is made again.
- an unfinished earlier run's files (a sidecar-less `video.mp4`, a damaged mp4): made again,
  and once the new files are in place every file of that earlier run the new one did not
  write (its `frames.npy`, `video_000.mp4` …, a calibration curve) is removed, so the folder
  never mixes two runs.
"""

from __future__ import annotations

import glob
import json
import os

from ..config import ConfigError
from ..report.output_names import video_patterns
from .keys import differences, result_settings
from .resume import finished, sidecar_path


def _sidecar(output_dir: str, name: str) -> dict | None:
    try:
        with open(sidecar_path(output_dir, name)) as f:
            record = json.load(f)
        return record if isinstance(record, dict) else None
    except (OSError, ValueError):
        return None


def check_single_outputs(output_dir: str, entry) -> bool:
    """True when `output_dir` already holds this run's finished video (nothing to make); False
    when the run should make it. Raises ConfigError when the folder holds another run's video."""
    record = _sidecar(output_dir, entry.name)
    if record is None:
        return False  # nothing finished there (absent, or damaged: its files are made again)
    job = record.get("job") if isinstance(record.get("job"), dict) else {}
    if job.get("result_key") != entry.key:
        saved = job.get("settings")
        what = (
            f"other settings ({differences(saved, result_settings(entry.spec))})"
            if isinstance(saved, dict)
            else "settings it does not record (an older version wrote it)"
        )
        raise ConfigError(
            f"output_dir={output_dir} already holds {entry.name}.mp4 and {entry.name}.json made with {what}; "
            f"nothing was changed there. Set another output_dir to keep that video, or delete "
            f"{entry.name}.mp4 and {entry.name}.json there to replace it"
        )
    done, _ = finished(output_dir, entry)
    if (
        done
        and entry.spec.output.save_frames
        and "frames" not in (record.get("files") or {})
        and not any("frames" in v for v in record.get("videos") or [] if isinstance(v, dict))
    ):
        return False  # the same video, but the frames were not kept then: make it again with them
    return done


def _listed(output_dir: str, record: dict) -> set[str]:
    """The files a sidecar lists (videos, frames, a calibration curve), as paths in `output_dir`."""
    found = set()
    for files in [record.get("files") or {}, *(v for v in record.get("videos") or [] if isinstance(v, dict))]:
        if isinstance(files, dict):
            found.update(str(files[k]) for k in ("video", "frames") if files.get(k))
    cache = record.get("cache")
    if isinstance(cache, dict) and cache.get("ratios_file"):
        found.add(str(cache["ratios_file"]))
    return {os.path.join(output_dir, os.path.basename(p)) for p in found}


def earlier_files(output_dir: str, name: str) -> set[str]:
    """Files in `output_dir` an earlier run of entry `name` may have left: what its sidecar lists
    and every file of that entry's naming (NAME.mp4, NAME_000.mp4, frames.npy …)."""
    found = _listed(output_dir, _sidecar(output_dir, name) or {})
    for pattern in video_patterns(name):
        found.update(glob.glob(os.path.join(glob.escape(output_dir), pattern)))
    return {p for p in found if os.path.isfile(p)}


def remove_earlier(output_dir: str, name: str, earlier: set[str]) -> None:
    """Once entry `name`'s new files are in place: remove the files of `earlier` that its new
    sidecar does not list, so the folder holds one run's files only."""
    keep = {os.path.realpath(p) for p in _listed(output_dir, _sidecar(output_dir, name) or {})}
    keep.add(os.path.realpath(sidecar_path(output_dir, name)))
    for path in earlier:
        if os.path.realpath(path) not in keep:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass


__all__ = ["check_single_outputs", "earlier_files", "remove_earlier"]
