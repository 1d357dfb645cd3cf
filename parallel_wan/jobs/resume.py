"""Where a job keeps what lets a re-run pick up: finished entries are recognised by their files,
an interrupted one by its saved loop state.

Finished: NAME.json (written last, atomically) exists, records the entry's result key, and the
sha256 of NAME.mp4's bytes equals the one it records. Anything else — no sidecar, a sidecar of
other settings, a missing or damaged video — is not finished and is made again.

Interrupted: OUTPUT_DIR/.parallel_wan/resume/NAME/state.rank<r>.{safetensors,json}
(pipeline/loop_state.py; one pair per torch rank, one for a JAX controller), with the state key
of the settings it was saved under. A state saved under other settings is refused, never used.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ..config import ConfigError
from ..pipeline.loop_state import rank_stem
from ..report.output_names import sidecar_name, video_name
from ..report.outputs import file_sha256
from .keys import differences

RESUME_DIR = os.path.join(".parallel_wan", "resume")


def video_path(output_dir: str, name: str) -> str:
    return os.path.join(output_dir, video_name(name))


def sidecar_path(output_dir: str, name: str) -> str:
    return os.path.join(output_dir, sidecar_name(name))


def state_dir(output_dir: str, name: str) -> Path:
    return Path(output_dir) / RESUME_DIR / name


def finished(output_dir: str, entry) -> tuple[bool, str]:
    """(done, why not) for a prompt-file entry."""
    sidecar = sidecar_path(output_dir, entry.name)
    if not os.path.exists(sidecar):
        return False, "not made yet"
    try:
        with open(sidecar) as f:
            record = json.load(f)
        job = record["job"]
        video, want = record["files"]["video"], record["mp4_sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return False, f"{sidecar} is damaged"
    if job.get("result_key") != entry.key:
        return False, "made with other settings"
    video = os.path.join(output_dir, os.path.basename(video))
    if not os.path.exists(video):
        return False, f"{video} is missing"
    if file_sha256(video) != want:
        return False, f"{video} does not match its sidecar's checksum"
    return True, ""


def check_named_outputs(output_dir: str, entry, prompts_file: str) -> None:
    """An entry with its own `name` whose NAME.json records other settings: refuse rather than
    overwrite a video the user may want (default names carry the settings' hash and never collide)."""
    sidecar = sidecar_path(output_dir, entry.name)
    try:
        with open(sidecar) as f:
            record = json.load(f)
        saved_key, saved = record["job"]["result_key"], record["job"].get("settings", {})
    except (OSError, ValueError, KeyError, TypeError):
        return  # absent or damaged: made again
    if saved_key != entry.key:
        from .keys import result_settings

        raise ConfigError(
            f"prompts={prompts_file} line {entry.line}: {entry.name}.json in {output_dir} was made "
            f"with other settings ({differences(saved, result_settings(entry.spec))}); to keep that "
            f'video, give this entry another "name" (or set another output_dir); to replace it, '
            f"delete {entry.name}.mp4 and {entry.name}.json there"
        )


def saved_state(output_dir: str, entry, rank: int, state_key: str, settings: dict) -> tuple[Path, int] | None:
    """(this rank's state stem, step) when the entry has a saved state for these settings;
    None when it has none. Raises ConfigError when one exists that must not be used."""
    folder = state_dir(output_dir, entry.name)
    if not folder.is_dir():
        return None
    stem = rank_stem(folder, rank)
    where = f"{folder}"
    if not Path(f"{stem}.json").exists():
        raise ConfigError(
            f"{where} holds no state for rank {rank}: it was saved by another mesh or is incomplete; "
            f"delete {where} to start {entry.name} over"
        )
    try:
        record = json.loads(Path(f"{stem}.json").read_text())
        meta, step = record["meta"], int(record["step"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{stem}.json is damaged ({exc}); delete {where} to start {entry.name} over") from None
    if meta.get("state_key") != state_key:
        raise ConfigError(
            f"{where} holds a state saved under other settings ({differences(meta.get('settings', {}), settings)}); "
            f"it is not used. Re-run with the settings it was saved with, or delete {where} to start "
            f"{entry.name} over"
        )
    if not Path(f"{stem}.safetensors").exists():
        raise ConfigError(f"{stem}.safetensors is missing; delete {where} to start {entry.name} over")
    return stem, step


def drop_state(output_dir: str, name: str) -> None:
    shutil.rmtree(state_dir(output_dir, name), ignore_errors=True)
