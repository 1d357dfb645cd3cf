"""The run's typed settings: the presets and the validated `RunSpec` (resolve.py makes one from
Hydra's composed config), with the small readers every check uses. Cheap: no torch import."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping

from ..caching.settings import CacheSettings
from ..errors import ConfigError
from ..parallel.mesh import MeshSpec
from .few_step import apply_recipe, schedule_values

INT_LIMIT = 2**63
TASKS = ("t2v", "i2v", "ti2v")
SAMPLERS = ("unipc", "euler")
SCHEDULES = ("auto", "official", "diffusers")
DTYPES = ("bfloat16", "float32")
BACKENDS = ("torch", "jax")
ATTENTION_IMPLS = ("ours", "xfuser")
# Where the transformer weights live during denoising (README "Memory"): resident = both experts
# whole on every device; sharded = each device keeps 1/world of every block and gathers one block
# at a time (FSDP); swap = the low-noise expert waits in host memory, is copied in during the
# last high-noise steps, and the high-noise expert is freed after its last step.
MEMORY_MODES = ("resident", "sharded", "swap")
# Latent channels the transformer sees per task: noise, plus mask + image latent for I2V.
TASK_IN_CHANNELS = {"t2v": 16, "i2v": 36, "ti2v": 48}


@dataclass(frozen=True)
class ModelPreset:
    name: str
    task: str
    experts: int  # 2 = high-noise + low-noise (A14B), 1 = TI2V-5B
    boundary: float | None  # switch to the low-noise expert when t < boundary·1000
    shift: float
    steps: int
    guidance_high: float
    guidance_low: float
    num_frames: int
    fps: int
    height: int
    width: int
    size_multiple: int  # VAE spatial stride × patch: 16 (Wan 2.1 VAE) or 32 (Wan 2.2 VAE)
    builtin: bool = False  # a tiny random model built in memory, no checkpoint needed
    # cache=magcache's defaults for this model: {curve: a caching/magcache_curves name (TI2V_5B:
    # the text-only or the image curve, picked by whether an image is given), threshold,
    # max_skips, retention} — the published settings. None: no shipped curve.
    magcache: dict | None = None
    sampler: str = "unipc"  # the preset's (or recipe's) sampler; `sampler=` overrides it
    # An explicit schedule (config/few_step.py), used as given; its length is `steps`.
    sigmas: tuple[float, ...] | None = None
    timesteps: tuple[float, ...] | None = None
    recipe: str | None = None  # a few_step.RECIPES name whose values this preset carries


@dataclass(frozen=True)
class RunSpec:
    model: ModelPreset
    mesh: MeshSpec
    backend: str
    prompts: tuple[str, ...]  # one video per prompt; dp splits several prompts
    negative_prompt: str | None  # None → the official default negative prompt
    image: str | None
    seed: int
    num_frames: int
    height: int
    width: int
    steps: int
    guidance_high: float
    guidance_low: float
    shift: float
    sampler: str
    schedule: str
    dtype: str
    device: str
    checkpoint_dir: str | None
    output_dir: str
    save_frames: bool
    attention_impl: str = "ours"
    dist_timeout_s: float = 600.0
    log_all_ranks: bool = False
    scan_loop: bool = False  # JAX: every step in one lax.scan (lax.cond picks the expert)
    jax_fsdp: bool = False  # JAX: weights sharded over every mesh axis, gathered one layer at a time
    weights_cache_dir: str | None = None  # converted-weights cache (weights/converted_weights.py); None: off
    memory: str = "resident"  # resident | sharded | swap (MEMORY_MODES)
    swap_prefetch_steps: int = 0  # memory=swap: 0 = exchange block by block in the last high-noise step; n = copy the whole expert from n steps before
    compile: bool = False  # torch: torch.compile each transformer block, q/k/v fused (backends/torch/qkv_fusion.py, runners/compiled.py)
    cache: CacheSettings = CacheSettings()  # step caching (caching/settings.py); kind "none": off
    sigmas: tuple[float, ...] | None = None  # explicit schedule (sampling/explicit.py), used as given
    timesteps: tuple[float, ...] | None = None  # … or as timesteps (σ = t/1000); at most one of the two
    recipe: str | None = None  # the few-step recipe applied to the preset (config/few_step.py)
    loras: tuple = ()  # ((role all|high|low, path, scale, setting), …): merged at load (lora/)

    @property
    def uses_guidance(self) -> bool:
        """Some expert runs CFG (its scale is not 1.0): the negative prompt is encoded."""
        return self.guidance_high != 1.0 or (self.model.experts == 2 and self.guidance_low != 1.0)

    @property
    def guides_every_step(self) -> bool:
        """Every expert runs CFG, so every forward has both halves (what CFG parallel needs)."""
        return self.guidance_high != 1.0 and (self.model.experts == 1 or self.guidance_low != 1.0)

    @property
    def prompt(self) -> str:
        return self.prompts[0]

    def seed_of(self, prompt_index: int) -> int:
        """Video i of a prompt batch is seeded seed + i, so it is the same video whatever the
        batch is split into."""
        return self.seed + prompt_index

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _pick(cfg: Mapping, key: str, default: Any) -> Any:
    value = cfg.get(key)
    return default if value is None else value


def _as(kind, key: str, value):
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}={value!r} is not a boolean; set {key}=true or {key}=false")
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{key}={value!r} is not a whole number; set e.g. {key}=42")
        if not -INT_LIMIT <= value < INT_LIMIT:  # torch, numpy and the JSON sidecar hold 64-bit integers
            raise ConfigError(f"{key}={value} does not fit in a 64-bit integer; set a smaller {key}")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}={value!r} is not a number; set e.g. {key}=5.0")
        if not math.isfinite(value):  # nan/inf would run and render noise (or hang a schedule)
            raise ConfigError(f"{key}={value} is not a finite number; set e.g. {key}=5.0")
        return float(value)
    if not isinstance(value, str):
        raise ConfigError(f"{key}={value!r} must be a string")
    return value


def _choice(key: str, value: str, options) -> str:
    if value not in options:
        raise ConfigError(f"{key}={value!r} is not known; choose one of: {', '.join(options)}")
    return value


def model_preset(cfg: Mapping) -> ModelPreset:
    fields = {f.name: f for f in dataclasses.fields(ModelPreset)}
    unknown = set(cfg) - set(fields)
    if unknown:
        raise ConfigError(f"model preset has unknown keys {sorted(unknown)}; known: {sorted(fields)}")
    missing = [n for n, f in fields.items() if n not in cfg and f.default is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"model preset {cfg.get('name')!r} lacks {missing}")
    cfg = apply_recipe(cfg, cfg.get("recipe"))
    for key in ("sigmas", "timesteps"):
        cfg[key] = schedule_values(f"model.{key}", cfg.get(key))
    if cfg["sigmas"] is not None and cfg["timesteps"] is not None:
        raise ConfigError(f"model preset {cfg.get('name')!r} gives both sigmas and timesteps; keep one")
    if cfg.get("magcache") is not None:
        magcache = dict(cfg["magcache"])
        unknown = set(magcache) - {"curve", "threshold", "max_skips", "retention"}
        if unknown:
            raise ConfigError(f"model preset {cfg.get('name')!r}: magcache has unknown keys {sorted(unknown)}")
        cfg["magcache"] = magcache
    preset = ModelPreset(**cfg)
    _choice("model.task", preset.task, TASKS)
    _choice("model.sampler", preset.sampler, SAMPLERS)
    explicit = preset.sigmas if preset.sigmas is not None else preset.timesteps
    if explicit is not None and len(explicit) != preset.steps:
        raise ConfigError(f"model preset {preset.name}: steps={preset.steps} but {len(explicit)} explicit "
                          "sigmas/timesteps; make them agree")
    if preset.experts not in (1, 2):
        raise ConfigError(f"model.experts={preset.experts} must be 1 or 2")
    if preset.experts == 2 and preset.boundary is None:
        raise ConfigError(f"model {preset.name}: two experts need model.boundary (e.g. 0.875)")
    return preset
