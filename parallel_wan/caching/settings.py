"""The `cache=` settings (conf/cache/*.yaml), checked before anything loads.

    cache=none                     every step runs the transformer (the default)
    cache=magcache                 skip the block stack on steps a calibrated curve of residual
                                   magnitude ratios says change little (MagCache)
    cache=taylorseer               run the transformer on a fixed schedule, predict its output on
                                   the other steps by a Taylor expansion (TaylorSeer, lite mode)
    cache=fbcache                  run block 0; skip the rest when its residual barely changed
                                   (First-Block Cache)

MagCache settings left null take the model preset's recommendation (`magcache:` in
conf/model/*.yaml: the official curve and the published threshold, K and retention).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ConfigError
from . import magcache_curves

KINDS = ("none", "magcache", "taylorseer", "fbcache")
KEYS = {
    "none": ("kind",),
    "magcache": ("kind", "threshold", "max_skips", "retention", "ratios", "calibrate"),
    "taylorseer": ("kind", "interval", "warmup", "order"),
    "fbcache": ("kind", "threshold"),
}


@dataclass(frozen=True)
class CacheSettings:
    kind: str = "none"
    threshold: float = 0.0  # magcache: largest accumulated error of a skip; fbcache: relative L1 change
    max_skips: int = 0  # magcache K: consecutive skips allowed
    retention: float = 0.0  # magcache: forced-compute fraction at the start of each expert's steps
    ratios: str | None = None  # magcache: the curve file; None: the preset's official curve
    calibrate: bool = False  # magcache: run dense and write the measured curve
    curve: tuple[float, ...] | None = None  # magcache: the curve (official format), read at resolve
    curve_name: str | None = None  # the shipped curve's name, when it is one
    split: int | None = None  # magcache: high-noise steps of the calibration run (None: from its schedule)
    interval: int = 0  # taylorseer: a computed step every `interval` steps after the warm-up
    warmup: int = 0  # taylorseer: steps each expert computes before predicting
    order: int = 0  # taylorseer: highest Taylor order

    @property
    def on(self) -> bool:
        return self.kind != "none"

    @property
    def skips(self) -> bool:
        """Whether any step may be skipped (a calibration run skips none)."""
        return self.on and not (self.kind == "magcache" and self.calibrate)

    def record(self) -> dict:
        """The settings that decide the result, for the sidecar."""
        keys = [k for k in KEYS[self.kind] if k != "ratios"]
        out = {k: getattr(self, k) for k in keys}
        if self.kind == "magcache":
            out["ratios"] = "measured by this run" if self.calibrate else (self.ratios or f"official {self.curve_name}")
            if self.split is not None:
                out["split"] = self.split
        if self.kind == "taylorseer":
            out["factors_dtype"] = "float32"
        return out


def _number(key: str, value, kind):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(
            f"cache.{key}={value!r} is not a number; set e.g. cache.{key}={'2' if kind is int else '0.05'}"
        )
    if kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise ConfigError(f"cache.{key}={value!r} is not a whole number")
        return int(value)
    value = float(value)
    if not math.isfinite(value):
        raise ConfigError(f"cache.{key}={value!r} is not finite; set a finite number, e.g. cache.{key}=0.05")
    return value


def _pick(cfg: Mapping, preset: Mapping, key: str, kind):
    value = cfg.get(key)
    if value is None:
        value = preset.get(key)
    if value is None:
        raise ConfigError(f"cache.{key} is not set and the model preset recommends none; set cache.{key}=…")
    return _number(key, value, kind)


def cache_settings(cfg: Mapping | None, magcache_preset: Mapping | None, with_image: bool) -> CacheSettings:
    """The validated settings of the composed `cache` group. `magcache_preset`: the model
    preset's `magcache` entry (curve name + recommended settings), or None."""
    cfg = dict(cfg or {"kind": "none"})
    kind = cfg.get("kind", "none")
    if kind not in KINDS:
        raise ConfigError(f"cache={kind!r} is not known; choose one of: {', '.join(KINDS)}")
    unknown = sorted(set(cfg) - set(KEYS[kind]))
    if unknown:
        raise ConfigError(
            f"cache={kind} has no setting {', '.join('cache.' + k for k in unknown)}; "
            f"its settings are: {', '.join('cache.' + k for k in KEYS[kind][1:]) or 'none'}"
        )
    if kind == "none":
        return CacheSettings()
    if kind == "fbcache":
        threshold = _pick(cfg, {}, "threshold", float)
        if threshold < 0:
            raise ConfigError(
                f"cache.threshold={threshold} is negative; First-Block Cache skips when the relative "
                "change is ≤ threshold, so use e.g. cache.threshold=0.05"
            )
        return CacheSettings(kind, threshold=threshold)
    if kind == "taylorseer":
        interval = _pick(cfg, {}, "interval", int)
        warmup = _pick(cfg, {}, "warmup", int)
        order = _pick(cfg, {}, "order", int)
        if interval < 1:
            raise ConfigError(f"cache.interval={interval} must be ≥ 1 (1 computes every step)")
        if warmup < 1:
            raise ConfigError(
                f"cache.warmup={warmup} must be ≥ 1: each expert computes its first step before "
                "anything can be predicted; set e.g. cache.warmup=3"
            )
        if order < 1:
            raise ConfigError(f"cache.order={order} must be ≥ 1 (1: linear extrapolation; 2: quadratic)")
        return CacheSettings(kind, interval=interval, warmup=warmup, order=order)
    return _magcache(cfg, dict(magcache_preset or {}), with_image)


def _magcache(cfg: Mapping, preset: dict, with_image: bool) -> CacheSettings:
    threshold = _pick(cfg, preset, "threshold", float)
    max_skips = _pick(cfg, preset, "max_skips", int)
    retention = _pick(cfg, preset, "retention", float)
    calibrate = cfg.get("calibrate", False)
    if not isinstance(calibrate, bool):
        raise ConfigError(f"cache.calibrate={calibrate!r} is not a boolean; set cache.calibrate=true or false")
    if threshold < 0:
        raise ConfigError(
            f"cache.threshold={threshold} is negative; MagCache skips while the accumulated error "
            "stays ≤ threshold, so use e.g. cache.threshold=0.06"
        )
    if max_skips < 1:
        raise ConfigError(
            f"cache.max_skips={max_skips} must be ≥ 1 (K: skipped steps in a row; the official setting is 2)"
        )
    if not 0 <= retention < 1:
        raise ConfigError(
            f"cache.retention={retention} must be in [0, 1): the fraction of each expert's first "
            "steps that always compute (official 0.2)"
        )
    ratios = cfg.get("ratios")
    curve_name = split = curve = None
    if calibrate and cfg.get("ratios") is not None:
        raise ConfigError("cache.calibrate=true measures a new curve; drop cache.ratios (it would be ignored)")
    if ratios is not None:
        if not isinstance(ratios, str):
            raise ConfigError(f"cache.ratios={ratios!r} must be the path of a JSON file (a list of ratios), or null")
        ratios = os.path.abspath(os.path.expanduser(ratios))
        curve, split = read_ratios(ratios)
    elif not calibrate:
        curve_name = preset.get("curve")
        if curve_name is None:
            raise ConfigError(
                "cache=magcache needs a curve and this model preset ships none; calibrate one with "
                "cache.calibrate=true, then pass it as cache.ratios=PATH/mag_ratios.json"
            )
        if curve_name == "TI2V_5B":  # one model, two calibrations: with and without a first frame
            curve_name = "TI2V_5B_I2V" if with_image else "TI2V_5B_T2V"
        curve = tuple(getattr(magcache_curves, curve_name))
        split = magcache_curves.CALIBRATION_SPLIT[curve_name]
    return CacheSettings(
        "magcache",
        threshold=threshold,
        max_skips=max_skips,
        retention=retention,
        ratios=ratios,
        calibrate=calibrate,
        curve=curve,
        curve_name=curve_name,
        split=split,
    )


def read_ratios(path: str) -> tuple[tuple[float, ...], int | None]:
    """(curve, split) from a ratios file: a JSON list in the official format (interleaved
    cond/uncond, 2·N − 2 numbers) or {"mag_ratios": [...], "split": k} (what
    cache.calibrate=true writes). Untrusted input: every way it can be wrong is a ConfigError."""
    where = f"cache.ratios={path}"
    if not os.path.isfile(path):
        raise ConfigError(f"{where} does not exist; give the JSON file cache.calibrate=true wrote (mag_ratios.json)")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{where} is not readable JSON ({exc}); give a list of ratios") from None
    split = None
    if isinstance(data, dict):
        if set(data) - {"mag_ratios", "split", "steps", "note"} or "mag_ratios" not in data:
            raise ConfigError(
                f'{where}: an object must hold "mag_ratios" (a list) and optionally "split"; it has {sorted(data)}'
            )
        split = data.get("split")
        data = data["mag_ratios"]
        if split is not None and (isinstance(split, bool) or not isinstance(split, int)):
            raise ConfigError(f'{where}: "split" must be a whole number of steps, not {split!r}')
    if not isinstance(data, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in data):
        raise ConfigError(f"{where} must hold a flat list of numbers (interleaved cond/uncond ratios)")
    if len(data) < 2 or len(data) % 2:
        raise ConfigError(
            f"{where} holds {len(data)} ratios; the official format has 2·N − 2 (an even count ≥ 2: "
            "cond and uncond for steps 1…N−1 of an N-step run)"
        )
    if not all(math.isfinite(v) and v > 0 for v in data):
        raise ConfigError(f"{where}: every ratio must be a finite number > 0")
    steps = len(data) // 2 + 1
    if split is not None and not 0 < split < steps:
        raise ConfigError(f"{where}: split={split} is outside the curve's {steps} steps")
    return tuple(float(v) for v in data), split
