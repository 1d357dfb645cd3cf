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
    "fps": "fps",  # the mp4's rate, and the seconds → frames rule
    "flow_shift": "shift",  # diffusers' scheduler flow_shift is Wan's sample_shift
    "boundary_ratio": "boundary",  # diffusers' WanPipeline boundary_ratio
    "strength": "strength",  # a remix's or an edit's: how much of the schedule runs from the source
    "mode": "mode",  # Animate: animate | replace (diffusers' WanAnimatePipeline `mode`)
    "prev_segment_conditioning_frames": "prev_segment_frames",  # Animate: diffusers' name
    "num_clips": "num_clips",  # S2V: at most this many clips
}
EDIT_ONLY = ("strength",)  # fields of a remix or an edit only (a video to start from)
# vLLM-Omni's name for classifier-free guidance with the negative prompt: Wan's guidance_scale is
# that very formula, so it is guidance_scale under another name (both experts, unless
# guidance_scale_2 is given).
GUIDANCE_ALIASES = ("true_cfg_scale",)
RECORDED = ("user", "metadata")  # bookkeeping: stored with the job and echoed, never a setting
IMAGE_FIELDS = ("input_reference", "image_reference", "reference_url")  # the first frame: video_requests.py
LAST_IMAGE = ("last_image",)  # the last frame (first-last-frame video): video_requests.py
AUDIO = ("audio_reference",)  # S2V's speech (vLLM-Omni's field): video_requests.py
# Animate's driving videos, by diffusers' WanAnimatePipeline's names (and the command line's):
# uploads, or data: URLs in JSON (video_requests.py)
VIDEO_INPUTS = ("pose_video", "face_video", "background_video", "mask_video")
REFUSED = ("n", "quality", "video_reference", "generate_sound")  # can't honour: refuse()
DERIVED = ("size", "seconds", "model")  # fields read here, not copied
LORA_FIELDS = ("loras", "lora")  # the registered LoRAs a request names (lora_registry.py; served.py reads them)
TAKEN = (
    tuple(SETTING_OF)
    + DERIVED
    + GUIDANCE_ALIASES
    + RECORDED
    + IMAGE_FIELDS
    + LAST_IMAGE
    + AUDIO
    + VIDEO_INPUTS
    + LORA_FIELDS
    + ("extra_params",)
)  # what a field may be
FIELDS = TAKEN + REFUSED  # known: the refused ones are refused with their reason, not as unknown
# run setting → the request field that sets it: the one table by which the server's answers say
# the CLI's words (`steps=0 …`) in the request's (`num_inference_steps=0 …`); words.py. `image` is
# a file on the server, set by the uploaded `input_reference`.
FIELD_OF = {setting: field for field, setting in SETTING_OF.items()} | {
    "image": "input_reference",
    "last_image": "last_image",
    "audio": "audio_reference",
    **{name: name for name in VIDEO_INPUTS},
    "video": "video",
    "extend": "video",
}
TEXT_FIELDS = ("prompt", "negative_prompt", "model", "size", "user", "mode")
MAX_PROMPT = 32_000  # characters, as OpenAI's Videos API bounds a prompt
MAX_USER = 256  # characters of `user`
# OpenAI's metadata: at most 16 pairs, keys of at most 64 characters, string values of at most 512
METADATA_PAIRS, METADATA_KEY, METADATA_VALUE = 16, 64, 512
QUALITY_DEFAULTS = ("auto", "default")  # a quality that asks for nothing in particular


class RequestError(ValueError):
    """A request that cannot run: HTTP 400 `{"error": {"message", "param"}}`. The message is the
    command line's one line for the same setting where there is one."""

    def __init__(self, message: str, param: str | None = None, status: int = 400, code: str | None = None):
        super().__init__(message)
        self.param, self.status, self.code = param, status, code  # code None: the status's (routes/errors.py)


def request_settings(fields: dict, fps: int, edit: bool = False) -> tuple[dict, dict, dict]:
    """(run settings, setting → the field that set it, the bookkeeping to record: user and
    metadata) of a request's fields; raises RequestError for a field nobody reads, one that
    cannot be read at all or one asking for what this server cannot do. A null field is an
    absent one; `extra_params` (vLLM-Omni's) holds more fields of this same table.
    `fps`: the model's, for `seconds` when the request gives no fps."""
    fields = present(fields)
    for key in fields:
        if key not in FIELDS:
            raise RequestError(
                f"{key}={_shown(fields[key])} is not a field of POST /v1/videos{_hint(key)}; "
                f"remove it (fields: {', '.join(TAKEN)})",
                key,
                code="unknown_parameter",
            )
    for key in REFUSED:
        if key in fields:
            refuse(key, fields[key])
    for key in EDIT_ONLY if not edit else ():
        if key in fields:
            raise RequestError(
                f"{key} is a field of a remix or an edit (POST /v1/videos/{{id}}/remix, POST /v1/videos/edits), "
                "which start from a video; drop it here",
                key,
            )
    if "prompt" not in fields:
        raise RequestError(
            "prompt is required: the text of the video to make", "prompt", code="missing_required_parameter"
        )
    for key in TEXT_FIELDS:
        if key in fields and not isinstance(fields[key], str):
            raise RequestError(f"{key}={_shown(fields[key])} must be one string", key)
    if not 1 <= len(fields["prompt"]) <= MAX_PROMPT:  # the API's bounds (minLength 1, maxLength 32,000)
        raise RequestError(f"prompt has {len(fields['prompt'])} characters; it must have 1 to {MAX_PROMPT}", "prompt")
    notes = bookkeeping(fields)
    settings, source = {}, {}
    for key, setting in SETTING_OF.items():
        if key in fields:
            value = fields[key]
            settings[setting] = value if key in TEXT_FIELDS else as_number(value)
            source[setting] = key
    _guidance(fields, settings, source)
    if "size" in fields:
        if "width" in settings or "height" in settings:
            raise RequestError("size was given with width/height; give size=WxH or width and height, not both", "size")
        settings["width"], settings["height"] = parse_size(fields["size"])
        source["width"] = source["height"] = "size"
    if "seconds" in fields and "num_frames" not in settings:  # num_frames, given too, wins (SGLang sends both)
        rate = settings.get("fps")
        rate = rate if isinstance(rate, int) and not isinstance(rate, bool) and rate > 0 else fps
        settings["num_frames"], source["num_frames"] = frames_for(fields["seconds"], rate), "seconds"
    return settings, source, notes


def present(fields: dict) -> dict:
    """The fields given, `extra_params` spread among them: null means absent, for every field."""
    fields = {k: v for k, v in fields.items() if v is not None}
    extra = fields.pop("extra_params", None)
    if extra is None:
        return fields
    if not isinstance(extra, dict):
        raise RequestError(
            f'extra_params={_shown(extra)} must be an object of more fields, e.g. {{"boundary_ratio": 0.9}}',
            "extra_params",
        )
    for key, value in extra.items():
        if value is None:
            continue
        if key == "extra_params" or key not in FIELDS:
            raise RequestError(
                f"extra_params.{key}={_shown(value)} is not a field of POST /v1/videos{_hint(key)}; remove it",
                f"extra_params.{key}",
                code="unknown_parameter",
            )
        if key in fields and fields[key] != value:
            raise RequestError(
                f"{key} is given twice, as {_shown(fields[key])} and in extra_params as {_shown(value)}; give it once",
                key,
            )
        fields[key] = value
    return fields


def refuse(key: str, value) -> None:
    """A field whose value would change the video in a way this server cannot make: 400 saying
    why, unless the value asks for what happens anyway (n=1, quality=auto, generate_sound=false)."""
    number = as_number(value)
    if key == "n":
        if number == 1 and not isinstance(number, bool):
            return
        raise RequestError(
            f"n={_shown(value)}: this server makes one video per request; send n=1 (or no n) and one request per "
            "video, each with its own seed",
            "n",
        )
    if key == "quality":
        if value in QUALITY_DEFAULTS:
            return
        raise RequestError(
            f"quality={_shown(value)} is not a setting here: a video's quality follows the model, size and "
            f"num_inference_steps; drop quality (or send one of {', '.join(QUALITY_DEFAULTS)})",
            "quality",
        )
    if key == "generate_sound" and value in (False, "false", "False", "0", 0):
        return
    what = {
        "generate_sound": "makes no sound",
        "video_reference": "reads no video in POST /v1/videos (it makes a video from text and, I2V/TI2V, an image)",
    }[key]
    raise RequestError(f"{key} was given, but this server {what}; drop {key}", key)


def bookkeeping(fields: dict) -> dict:
    """`user` and `metadata` as OpenAI bounds them; recorded with the job and echoed."""
    notes = {}
    if "user" in fields:
        if len(fields["user"]) > MAX_USER:
            raise RequestError(f"user has {len(fields['user'])} characters; it may have at most {MAX_USER}", "user")
        notes["user"] = fields["user"]
    if "metadata" in fields:
        metadata = fields["metadata"]
        if not isinstance(metadata, dict) or len(metadata) > METADATA_PAIRS:
            raise RequestError(
                f"metadata={_shown(metadata)} must be an object of at most {METADATA_PAIRS} key-value pairs",
                "metadata",
            )
        for key, value in metadata.items():
            if not isinstance(value, str) or len(key) > METADATA_KEY or len(value) > METADATA_VALUE:
                raise RequestError(
                    f"metadata[{key[:40]!r}] must be a string of at most {METADATA_VALUE} characters under a key of "
                    f"at most {METADATA_KEY}",
                    "metadata",
                )
        notes["metadata"] = dict(metadata)
    return notes


def _guidance(fields: dict, settings: dict, source: dict) -> None:
    """true_cfg_scale is guidance_scale; guidance_scale alone sets both experts (diffusers' rule)."""
    alias = next((a for a in GUIDANCE_ALIASES if a in fields), None)
    if alias is not None:
        value = as_number(fields[alias])
        if "guidance_scale" in fields and as_number(fields["guidance_scale"]) != value:
            raise RequestError(
                f"{alias}={_shown(fields[alias])} and guidance_scale={_shown(fields['guidance_scale'])} are the same "
                "scale here (Wan's guidance is true CFG); give one of them",
                alias,
            )
        if "guidance_scale" not in fields:
            settings["guidance_high"], source["guidance_high"] = value, alias
    first = "guidance_scale" if "guidance_scale" in fields else alias
    if first is not None and "guidance_scale_2" not in fields:
        settings["guidance_low"], source["guidance_low"] = settings["guidance_high"], first


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
    """The video's true duration, (frames - 1) / fps as frames_for counts it, to 2 decimals:
    "5" for 81 frames at 16 fps, "0.33" for 9 at 24."""
    return f"{round((num_frames - 1) / fps, 2):g}"


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
