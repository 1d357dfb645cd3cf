"""Checks of the settings as a whole that resolve.py calls: keys nobody reads, the seed's range,
folders the run will write into. Cheap (a YAML read and a few stat calls), no torch import."""

from __future__ import annotations

import difflib
import functools
import os
import tempfile
from collections.abc import Mapping

from ..conf_dir import conf_dir
from ..errors import ConfigError
from .schema import INT_LIMIT

CONFIG_YAML = os.path.join(conf_dir(), "config.yaml")


@functools.lru_cache(maxsize=1)
def known_keys() -> frozenset[str]:
    """The top-level settings: every key of conf/config.yaml and every config group of its
    defaults list. Read from the file, so a setting added there is known here at once."""
    from omegaconf import OmegaConf

    conf = OmegaConf.to_container(OmegaConf.load(CONFIG_YAML), resolve=False)
    groups = set()
    for entry in conf.pop("defaults", []):
        if isinstance(entry, dict):
            groups.update(k for k in entry if not k.startswith("override "))
    return frozenset(set(conf) - {"hydra"} | groups)


@functools.cache
def default_value(key: str):
    """conf/config.yaml's value of a top-level setting: what a run has when the command line
    leaves the key alone (how a setting the user gave is told from one they did not)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(CONFIG_YAML), resolve=False).get(key)


def check_known_keys(cfg: Mapping) -> None:
    """A key nothing reads — mistyped, or added with Hydra's `+` — would be silently ignored
    and the run would go on with the default; refuse it, naming the nearest real setting."""
    unknown = sorted(set(cfg) - known_keys() - {"hydra"})
    if unknown:
        key = unknown[0]
        raise ConfigError(
            f"{key}={cfg[key]!r} is not a setting{_nearest(key, known_keys())}; remove it "
            "(python -m parallel_wan.run --cfg job lists every setting)"
        )


def _nearest(key: str, options) -> str:
    close = difflib.get_close_matches(key, sorted(options), n=1, cutoff=0.5)
    if "_" in key and not (close and _words(close[0]) & _words(key)):
        # frame_count → num_frames: a setting sharing a word beats a spelling that shares none
        # (frame_count and quant_compute are as close letter by letter)
        close = [o for o in sorted(options) if _words(key) & _words(o)][:1] or close
    return f" (did you mean {close[0]}?)" if close else ""


def _words(name: str) -> set[str]:
    parts = name.split("_")
    return set(parts) | {w.rstrip("s") for w in parts}


def check_seed(seed: int, prompts: int) -> None:
    """Prompt i is seeded seed + i (RunSpec.seed_of); every one must be a torch generator seed."""
    if seed < 0 or seed + prompts - 1 >= INT_LIMIT:
        why = (
            "a seed is a 64-bit generator seed"
            if prompts == 1
            else f"prompt i of the {prompts} is seeded seed + i, and each must be a 64-bit generator seed"
        )
        raise ConfigError(
            f"seed={seed} must be between 0 and {INT_LIMIT - prompts} ({why}); set e.g. seed=42", setting="seed"
        )


def writable_folder(key: str, value: str, instead: str) -> str:
    """The absolute path of a folder the run will create or write into, checked now — not after
    minutes of loading: it, or its nearest existing parent, must be a writable folder.
    `instead`: the alternative the message offers."""
    path = os.path.abspath(os.path.expanduser(value))
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ConfigError(
            f"{key}={path}: {existing} is a file, not a folder; pick a folder path, {instead}", setting=key
        )
    try:  # a real write, not os.access: that says yes to root on a read-only mount or in /sys
        tempfile.TemporaryFile(dir=existing).close()  # unnamed (O_TMPFILE) where the kernel can
    except OSError as exc:
        raise ConfigError(
            f"{key}={path}: {existing} is not writable ({exc.strerror}); pick a writable folder, {instead}",
            setting=key,
        ) from None
    return path
