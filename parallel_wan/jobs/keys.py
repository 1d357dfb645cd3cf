"""What identifies a generation's result, as hashes (no torch).

`result_key`: what the video is — model, checkpoint, prompt, image content, seed, size, steps,
guidance, sampler, schedule, dtype, cache, LoRAs. Not how it is made (mesh, backend, memory
mode, compile): a job re-run on another number of GPUs still skips what is done. Default entry
names carry its first 8 hex digits, so changing a setting makes new files, never overwrites.

`state_key`: everything a saved loop state depends on — the result key's settings plus the
mesh, backend and memory mode (a rank's state is its own token shard) and this version of
parallel_wan. A state is only resumed under the same state key.
"""

from __future__ import annotations

import hashlib
import json

from .. import __version__
from ..config import RunSpec
from ..config.quantization import DEFAULTS as QUANT_DEFAULTS
from ..config.schema import ANIMATE_VIDEOS
from ..report.outputs import file_sha256

# Settings that change neither the frames nor the loop state's layout.
NOT_DECIDING = ("output_dir", "save_frames", "log_all_ranks", "dist_timeout_s", "weights_cache_dir")
# Settings that decide how (and where) the result is computed, not what it is.
HOW = (
    "mesh",
    "backend",
    "device",
    "attention_impl",
    "compile",
    "memory",
    "swap_prefetch_steps",
    "jax_fsdp",
    "scan_loop",
)


def deciding_settings(spec: RunSpec) -> dict:
    settings = {k: v for k, v in spec.to_dict().items() if k not in NOT_DECIDING}
    # quantize/quant_compute at their defaults are left out, so the keys of runs made before
    # those settings existed (names, finished videos, saved states) still match.
    settings = {k: v for k, v in settings.items() if QUANT_DEFAULTS.get(k, object()) != v}
    # attention_impl=auto was named "ours" before issue 27: loop states saved then still resume.
    if settings.get("attention_impl") == "auto":
        settings["attention_impl"] = "ours"
    # sequence_parallel=xfuser was attention_impl=xfuser before issue 39: hashed as it was then.
    if settings.pop("sequence_parallel", "ours") == "xfuser":
        settings["attention_impl"] = "xfuser"
    # The image's content decides the video, not where it lies: a moved folder keeps its names.
    settings["image"] = {"sha256": file_sha256(spec.video.image)} if spec.video.image else None
    for name in ("video", "extend", "last_image"):  # the same for a source video and a last frame
        if getattr(spec.video, name) is not None:
            settings[name] = {"sha256": file_sha256(getattr(spec.video, name))}
    for name in (*ANIMATE_VIDEOS, "audio"):  # and Animate's driving videos, S2V's speech
        if settings.get(name) is not None:
            settings[name] = {"sha256": file_sha256(settings[name])}
    return settings


def result_settings(spec: RunSpec) -> dict:
    return {k: v for k, v in deciding_settings(spec).items() if k not in HOW}


def state_settings(spec: RunSpec, world: int) -> dict:
    return {**deciding_settings(spec), "world": world, "parallel_wan": __version__}


def digest(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()


def result_key(spec: RunSpec) -> str:
    return digest(result_settings(spec))


def differences(saved: dict, now: dict, limit: int = 4) -> str:
    """'steps: 40 → 50, cache.kind: none → magcache' — the settings whose values differ, nested
    settings by their dotted leaf names, long values summarised, at most `limit` of them. Both
    sides as JSON holds them (tuples are lists)."""
    saved, now = (json.loads(json.dumps(d, sort_keys=True, default=str)) for d in (saved, now))
    changed = list(_changed(saved, now, ""))
    shown = [f"{key}: {_short(old)} → {_short(new)}" for key, old, new in changed[:limit]]
    return ", ".join(shown) + (f" and {len(changed) - limit} more" if len(changed) > limit else "")


_UNSET = object()


def _changed(old, new, path: str):
    """(dotted key, old, new) of every leaf that differs; a dict against a non-dict is one leaf,
    and so is a settings section whose `kind` changed (cache=none → magcache, not its 11 fields)."""
    if isinstance(old, dict) and isinstance(new, dict):
        if "kind" in old and "kind" in new and old["kind"] != new["kind"]:
            yield f"{path}.kind" if path else "kind", old["kind"], new["kind"]  # its other fields follow the kind
            return
        for key in sorted(set(old) | set(new)):
            yield from _changed(old.get(key, _UNSET), new.get(key, _UNSET), f"{path}.{key}" if path else key)
    elif old != new:
        yield path, old, new


def _short(value, width: int = 40) -> str:
    """A value as the user wrote it, summarised when long: strings cut in the middle, lists of
    numbers by their count and first values, objects by their keys."""
    if value is _UNSET:
        return "(not set)"
    if isinstance(value, list) and len(value) > 4:
        head = ", ".join(_short(v, 12) for v in value[:2])
        return f"[{head}, … {len(value)} values]"
    if isinstance(value, dict) and len(json.dumps(value)) > width:
        keys = sorted(value)
        return "{" + ", ".join(keys[:3]) + (f", … {len(keys)} keys" if len(keys) > 3 else "") + "}"
    text = json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    if len(text) <= width:
        return text
    half = (width - 1) // 2
    return text[:half] + "…" + text[-half:]
