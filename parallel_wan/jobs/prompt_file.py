"""Reading a prompt file (`prompts=FILE`): one generation per line, as plain text or JSON Lines.

A line that starts with `{` (or `[`, a mistake JSON users make) is a JSON object with `prompt` and any of ENTRY_KEYS;
any other
non-blank line is a prompt as it stands. Blank lines and lines starting with `#` are skipped
(they still count for line numbers). Every problem names its line, and the whole file is
read and checked before anything loads. Cheap: no torch, no jax.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from ..errors import ConfigError

# What an entry may set; everything else comes from the command line / conf/.
ENTRY_KEYS = (
    "prompt",
    "negative_prompt",
    "seed",
    "image",
    "last_image",
    "pose_video",  # Animate-14B's driving videos and mode, per entry (config/animate_inputs.py)
    "face_video",
    "background_video",
    "mask_video",
    "mode",
    "audio",  # S2V-14B's speech and clip cap, per entry (config/s2v_inputs.py)
    "num_clips",
    "num_frames",
    "height",
    "width",
    "steps",
    "guidance_high",
    "guidance_low",
    "name",
)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class FileEntry:
    line: int  # 1-based line number in the file
    fields: dict  # ENTRY_KEYS → value (at least "prompt")


def read_prompt_file(path: str) -> list[FileEntry]:
    """The entries of `path`; raises ConfigError naming the file, the line and the fix."""
    where = f"prompts={path}"
    if os.path.isdir(path):
        raise ConfigError(
            f"{where} is a folder, not a file; give a text file with one prompt per line, or JSON "
            "Lines (e.g. prompts=examples/prompts.jsonl)"
        )
    if not os.path.isfile(path):
        raise ConfigError(f"{where} does not exist; give a text file with one prompt per line, or JSON Lines")
    try:
        with open(path, "rb") as f:
            raw = f.read()
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{where} line {line}: not UTF-8 text ({exc.reason}); save the file as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"{where} could not be read ({exc.strerror}); check the path and its permissions") from None
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        entries.append(FileEntry(number, _fields(stripped, f"{where} line {number}", os.path.dirname(path))))
    if not entries:
        raise ConfigError(f"{where} holds no prompt (blank lines and # comments only); write one prompt per line")
    return entries


def _fields(line: str, where: str, folder: str) -> dict:
    if not line.startswith(("{", "[")):
        return {"prompt": line}
    try:
        fields = json.loads(line, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{where}: not valid JSON ({exc.msg} at column {exc.colno}); write one JSON object per "
            'line, e.g. {"prompt": "a cat surfing", "seed": 1}'
        ) from None
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if not isinstance(fields, dict):
        raise ConfigError(f'{where}: a JSON line must be an object, e.g. {{"prompt": "a cat surfing"}}')
    unknown = sorted(set(fields) - set(ENTRY_KEYS))
    if unknown:
        raise ConfigError(
            f"{where}: {unknown[0]!r} is not an entry key; an entry may set {', '.join(ENTRY_KEYS)} "
            "(every other setting comes from the command line)"
        )
    prompt = fields.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ConfigError(f'{where}: "prompt" must be a non-empty string (got {prompt!r})')
    name = fields.get("name")
    if name is not None and not (isinstance(name, str) and NAME_PATTERN.match(name)):
        raise ConfigError(
            f"{where}: name={name!r} must be 1-128 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit (it names NAME.mp4 and NAME.json)"
        )
    for key in ("image", "last_image", "pose_video", "face_video", "background_video", "mask_video", "audio"):
        image = fields.get(key)
        if isinstance(image, str) and image and not os.path.isabs(image):
            # Relative to the prompt file, so a folder of prompts and images moves as one.
            fields = {**fields, key: os.path.join(folder, image)}
    return fields


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows; give a finite number")
