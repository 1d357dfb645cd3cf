"""A request's fields → the run settings they set, the way the command line sets them.

OpenAI's Videos API names (`size`, `seconds`, `input_reference`) and the extensions other Wan
servers accept (`num_inference_steps`, `guidance_scale`, …) map onto our settings; everything
else about the run (model, checkpoint, mesh, memory, dtype, cache, LoRA) was fixed when the
server started. A multipart form sends every field as a string: numbers are read as the command
line reads `key=value`, so "4" is a whole number and "many" stays a string that the settings'
own check refuses with the CLI's words.

Guidance, as in diffusers' Wan pipelines: `guidance_scale` is the high-noise expert's scale
(guidance_high), `guidance_scale_2` the low-noise expert's (guidance_low); given only
`guidance_scale`, both experts use it (diffusers' rule — never 1.0 for a missing second scale).
"""

from __future__ import annotations

import difflib
import math
import re

from ..config.checks import known_keys

# request field → the run setting it sets (one to one)
SETTING_OF = {
    "prompt": "prompt",
    "negative_prompt": "negative_prompt",
    "seed": "seed",
    "width": "width",
    "height": "height",
    "num_frames": "num_frames",
    "num_inference_steps": "steps",
    "guidance_scale": "guidance_high",
    "guidance_scale_2": "guidance_low",
}
DERIVED = ("size", "seconds", "model", "input_reference")  # fields read here, not copied
FIELDS = tuple(SETTING_OF) + DERIVED
# run setting → the request field that sets it: the one table by which the server's answers say
# the CLI's words (`steps=0 …`) in the request's (`num_inference_steps=0 …`); words.py. `image` is
# a file on the server, set by the uploaded `input_reference`.
FIELD_OF = {setting: field for field, setting in SETTING_OF.items()} | {"image": "input_reference"}
TEXT_FIELDS = ("prompt", "negative_prompt", "model", "size")
MAX_PROMPT = 32_000  # characters, as OpenAI's Videos API bounds a prompt


class RequestError(ValueError):
    """A request that cannot run: HTTP 400 `{"error": {"message", "param"}}`. The message is the
    command line's one line for the same setting where there is one."""

    def __init__(self, message: str, param: str | None = None, status: int = 400, code: str | None = None):
        super().__init__(message)
        self.param, self.status, self.code = param, status, code  # code None: the status's (routes/errors.py)


def request_settings(fields: dict, fps: int) -> tuple[dict, dict]:
    """(run settings, setting → the field that set it) of a request's fields; raises
    RequestError for a field nobody reads or one that cannot be read at all."""
    for key, value in fields.items():
        if key not in FIELDS:
            raise RequestError(
                f"{key}={_shown(value)} is not a field of POST /v1/videos{_hint(key)}; "
                f"remove it (fields: {', '.join(FIELDS)})",
                key,
                code="unknown_parameter",
            )
    if "prompt" not in fields or fields["prompt"] is None:
        raise RequestError(
            "prompt is required: the text of the video to make", "prompt", code="missing_required_parameter"
        )
    for key in TEXT_FIELDS:
        if key in fields and fields[key] is not None and not isinstance(fields[key], str):
            raise RequestError(f"{key}={_shown(fields[key])} must be one string", key)
    if not 1 <= len(fields["prompt"]) <= MAX_PROMPT:  # the API's bounds (minLength 1, maxLength 32,000)
        raise RequestError(f"prompt has {len(fields['prompt'])} characters; it must have 1 to {MAX_PROMPT}", "prompt")
    settings, source = {}, {}
    for key, setting in SETTING_OF.items():
        if fields.get(key) is not None:
            value = fields[key]
            settings[setting] = value if key in TEXT_FIELDS else as_number(value)
            source[setting] = key
    if fields.get("guidance_scale") is not None and fields.get("guidance_scale_2") is None:
        settings["guidance_low"], source["guidance_low"] = settings["guidance_high"], "guidance_scale"
    if fields.get("size") is not None:
        if "width" in settings or "height" in settings:
            raise RequestError("size was given with width/height; give size=WxH or width and height, not both", "size")
        settings["width"], settings["height"] = parse_size(fields["size"])
        source["width"] = source["height"] = "size"
    if fields.get("seconds") is not None:
        if "num_frames" in settings:
            raise RequestError("seconds was given with num_frames; give one of them", "seconds")
        settings["num_frames"], source["num_frames"] = frames_for(fields["seconds"], fps), "seconds"
    return settings, source


def as_number(value):
    """A form's string as `key=value` on the command line reads it: a whole number, a number, or
    the string itself (which the setting's check then refuses with its own words)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)  # also nan and inf, which the settings refuse as not finite
    except ValueError:
        return value


def parse_size(value) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", str(value))
    if not m:
        raise RequestError(f"size={_shown(value)} must be WIDTHxHEIGHT in pixels, e.g. size=832x480", "size")
    return int(m.group(1)), int(m.group(2))


def frames_for(seconds, fps: int) -> int:
    """Frames for `seconds` at the model's fps: seconds·fps + 1, to the nearest 4k+1 (the VAE's
    temporal stride; 5 s at 16 fps is Wan's 81 frames)."""
    value = as_number(seconds)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise RequestError(f"seconds={_shown(seconds)} must be a positive number of seconds, e.g. seconds=4", "seconds")
    return 4 * max(1, round(value * fps / 4)) + 1


def seconds_of(num_frames: int, fps: int) -> str:
    return f"{(num_frames - 1) / fps:g}"


def _hint(key: str) -> str:
    """What an unknown field may have meant: the field of a command-line setting (steps →
    num_inference_steps), a setting fixed at start, a near spelling or a field sharing a word
    (frame_count → num_frames); nothing otherwise (`format` is not `prompt`)."""
    if key in FIELD_OF:
        return f" (the field for {key} is {FIELD_OF[key]})"
    if key in known_keys():
        return f" ({key} is set when the server starts; a request cannot change it)"
    close = (
        difflib.get_close_matches(key, FIELDS, n=1, cutoff=0.75) or [f for f in FIELDS if _words(key) & _words(f)][:1]
    )
    return f" (did you mean {close[0]}?)" if close else ""


def _words(name: str) -> set[str]:
    parts = name.split("_")
    return set(parts) | {w.rstrip("s") for w in parts}


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"
