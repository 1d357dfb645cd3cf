"""The run's typed settings: the presets and the validated `RunSpec` (resolve.py makes one from
Hydra's composed config), with the small readers every check uses. Cheap: no torch import."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..backends.capabilities import BACKENDS as _BACKEND_CAPABILITIES
from ..caching.settings import CacheSettings
from ..errors import ConfigError
from ..models.variants import AUDIO, IMAGE, LAST_IMAGE
from ..parallel.mesh import MeshSpec
from .few_step import apply_recipe, schedule_values
from .quantization import NO_QUANTIZATION, QuantSettings
from .sparse import NO_SPARSE, SparseSettings

INT_LIMIT = 2**63
SAMPLERS = ("unipc", "euler")
SCHEDULES = ("auto", "official", "diffusers")
DTYPES = ("bfloat16", "float32")
BACKENDS = tuple(_BACKEND_CAPABILITIES)  # backends/capabilities.py registers them
# Where the transformer weights live during denoising (README "Memory"): resident = both experts
# whole on every device; sharded = each device keeps 1/world of every block and gathers one block
# at a time (FSDP); swap = the low-noise expert waits in host memory, is copied in during the
# last high-noise steps, and the high-noise expert is freed after its last step.
MEMORY_MODES = ("resident", "sharded", "swap")


@dataclass(frozen=True)
class ModelPreset:
    """A model preset (`conf/model/<name>.yaml`): how to run the architecture it names. `task`,
    `experts` and `size_multiple` are facts of that architecture (models/registry.py), filled in
    by `model_preset` and kept here as the preset's record (result keys hash it)."""

    name: str
    task: str  # the architecture's variant's (models/variants.py)
    experts: int  # 2 = high-noise + low-noise (A14B), 1 = TI2V-5B: len(the variant's experts)
    boundary: float | None  # switch to the low-noise expert when t < boundary·1000
    shift: float
    steps: int
    guidance_high: float
    guidance_low: float
    num_frames: int
    fps: int
    height: int
    width: int
    size_multiple: int  # VAE spatial stride × patch: 16 (Wan 2.1 VAE) or 32 (Wan 2.2 VAE) (models/latent.py)
    architecture: str = ""  # the registered architecture it runs (models/registry.py); unset: its name
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

    @property
    def variant(self):
        """Its architecture's variant (models/variants.py): the inputs it takes, per-token
        timesteps, its experts' names."""
        from ..models.registry import architecture

        return architecture(self.architecture).variant


def uses_guidance(guidance_high: float, guidance_low: float, experts: int) -> bool:
    """Some expert runs CFG (its scale is not 1.0): the negative prompt is encoded."""
    return guidance_high != 1.0 or (experts == 2 and guidance_low != 1.0)


def guides_every_step(guidance_high: float, guidance_low: float, experts: int) -> bool:
    """Every expert runs CFG, so every forward has both halves (what CFG parallel needs)."""
    return guidance_high != 1.0 and (experts == 1 or guidance_low != 1.0)


@dataclass(frozen=True)
class VideoSettings:
    """What to make."""

    prompts: tuple[str, ...]  # one video per prompt; dp splits several prompts
    negative_prompt: str | None  # None → the official default negative prompt
    image: str | None  # the first frame (I2V, TI2V)
    seed: int
    num_frames: int
    height: int
    width: int
    video: str | None = None  # video-to-video: the source video (config/source_video.py)
    strength: float = 0.8  # … and how much of the schedule runs from it noised
    extend: str | None = None  # a video continued from its last frame (the first frame: config/source_video.py)
    last_image: str | None = None  # first-last-frame video: the last frame (I2V-A14B)
    animate: object | None = None  # Animate-14B: its driving videos and mode (config/animate_inputs.AnimateInputs)
    s2v: object | None = None  # S2V-14B: its audio and clip count (config/s2v_inputs.S2VInputs)
    # A server's batch of requests (jobs/batch.py): each prompt's own seed and negative prompt.
    # None (every run of the command line): prompt i is seeded seed + i, and one negative serves all.
    seeds: tuple[int, ...] | None = None
    negative_prompts: tuple[str | None, ...] | None = None

    @property
    def inputs(self) -> frozenset[str]:
        """The inputs besides the prompt that are given (models/variants.py's names)."""
        given = [IMAGE] if self.image is not None or self.extend is not None else []
        if self.animate is not None:
            a = self.animate
            given += [name for name, path in vars(a).items() if name.endswith("_video") and path is not None]
        if self.s2v is not None:
            given += [AUDIO] + (["pose_video"] if self.s2v.pose_video is not None else [])
        return frozenset(given + ([LAST_IMAGE] if self.last_image is not None else []))

    @property
    def prompt(self) -> str:
        return self.prompts[0]

    def seed_of(self, prompt_index: int) -> int:
        """Video i of a prompt batch is seeded seed + i, so it is the same video whatever the
        batch is split into; a batch of requests gives each prompt its own seed."""
        return self.seed + prompt_index if self.seeds is None else self.seeds[prompt_index]


@dataclass(frozen=True)
class SamplingSettings:
    """The denoising schedule and guidance."""

    steps: int
    guidance_high: float  # the high-noise expert's CFG scale (diffusers' guidance_scale)
    guidance_low: float  # the low-noise expert's (guidance_scale_2)
    shift: float
    sampler: str
    schedule: str
    sigmas: tuple[float, ...] | None  # explicit schedule (sampling/explicit.py), used as given
    timesteps: tuple[float, ...] | None  # … or as timesteps (σ = t/1000); at most one of the two
    recipe: str | None  # the few-step recipe applied to the preset (config/few_step.py)


@dataclass(frozen=True)
class WeightSettings:
    """Where the weights come from and what is merged into them."""

    checkpoint_dir: str | None  # None: the built-in tiny model
    loras: tuple  # ((role all|high|low, path, scale, setting), …): merged at load (lora/)
    cache_dir: str | None  # the converted-weights cache (weights/converted_weights.py); None: off
    # one safetensors file per expert replacing its weights from checkpoint_dir (config/expert_files.py)
    file: str | None = None  # weights= (TI2V-5B)
    file_high: str | None = None  # weights_high= (A14B)
    file_low: str | None = None  # weights_low= (A14B)

    def expert_files(self) -> dict[str, str]:
        """Setting → path of the expert files given ({} when none)."""
        given = {"weights": self.file, "weights_high": self.file_high, "weights_low": self.file_low}
        return {key: path for key, path in given.items() if path is not None}


@dataclass(frozen=True)
class MemorySettings:
    """Where the transformer weights live during denoising (MEMORY_MODES, README "Memory")."""

    mode: str  # resident | sharded | swap
    swap_prefetch_steps: (
        int  # swap: 0 = exchange block by block in the last high-noise step; n = copy from n steps before
    )


@dataclass(frozen=True)
class ExecutionSettings:
    """How and where the run computes; none of it changes what the video is."""

    backend: str  # torch | jax
    device: str
    dtype: str  # the transformer's and the loop's dtype (norms, modulation, embeddings stay float32)
    attention_impl: str  # auto | a registered kernel setting: sdpa | flash | cudnn | sage (config/attention.py)
    compile: bool  # torch: torch.compile each transformer block, q/k/v fused
    scan_loop: bool  # JAX: every step in one lax.scan (lax.cond picks the expert)
    dist_timeout_s: float
    sequence_parallel: str = "ours"  # ours | xfuser (xDiT's attention, its own kernels)
    # the setting that chose sequence_parallel, as its refusals name it: attention_impl for the
    # old attention_impl=xfuser
    sequence_parallel_set_by: str = "sequence_parallel"
    # JAX: where compiled programs are kept between runs — auto | off | an absolute folder
    # (backends/jax/compile_cache.py); not in the sidecar's config, as it decides nothing
    compile_cache: str = "auto"


@dataclass(frozen=True)
class OutputSettings:
    dir: str
    save_frames: bool
    log_all_ranks: bool


@dataclass(frozen=True)
class RunSpec:
    """Every setting of a run, validated (resolve.py), in sections as the code reads them. The
    command line and conf/config.yaml name settings flat (`steps=8`); `to_dict()` gives them back
    under those names (the sidecar's "config", the result keys of jobs/keys.py)."""

    model: ModelPreset
    mesh: MeshSpec
    video: VideoSettings
    sampling: SamplingSettings
    cache: CacheSettings  # step caching (caching/settings.py); kind "none": off
    weights: WeightSettings
    memory: MemorySettings
    execution: ExecutionSettings
    output: OutputSettings
    quantization: QuantSettings = NO_QUANTIZATION  # config/quantization.py
    sparse_attention: SparseSettings = NO_SPARSE  # config/sparse.py; kind "none": dense

    @property
    def uses_guidance(self) -> bool:
        return uses_guidance(self.sampling.guidance_high, self.sampling.guidance_low, self.model.experts)

    @property
    def guides_every_step(self) -> bool:
        return guides_every_step(self.sampling.guidance_high, self.sampling.guidance_low, self.model.experts)

    @property
    def shards_weights_over_mesh(self) -> bool:
        """memory=sharded on a backend whose arrays shard over its device mesh (JAX: NamedSharding
        over every mesh axis, gathered one layer at a time in the scan) — what jax_fsdp=true names."""
        return self.memory.mode == "sharded" and _BACKEND_CAPABILITIES[self.execution.backend].sharded_memory == "mesh"

    def replace(self, **settings) -> RunSpec:
        """A copy with settings changed, named as on the command line (`steps=`, `output_dir=`,
        `memory=`, …) or by section (`model=`, `mesh=`, `cache=`)."""
        sections: dict[str, dict] = {}
        top = {}
        for name, value in settings.items():
            if name in SECTION_OF:
                section, field = SECTION_OF[name]
                sections.setdefault(section, {})[field] = value
            elif name in {f.name for f in dataclasses.fields(self)}:
                top[name] = value
            else:
                raise TypeError(f"RunSpec has no setting {name!r}")
        for section, fields in sections.items():
            top[section] = dataclasses.replace(top.get(section, getattr(self, section)), **fields)
        return dataclasses.replace(self, **top)

    def to_dict(self) -> dict:
        """The settings under their command-line names (flat), with the model, mesh and cache as
        records."""
        flat = {
            # the architecture is the preset's (its name decides it): left out, so keys stay as they were
            "model": {k: v for k, v in dataclasses.asdict(self.model).items() if k != "architecture"},
            "mesh": dataclasses.asdict(self.mesh),
            "cache": dataclasses.asdict(self.cache),
        }
        for name, (section, field) in SECTION_OF.items():
            flat[name] = getattr(getattr(self, section), field)
        flat["jax_fsdp"] = self.shards_weights_over_mesh  # the older spelling, kept in sidecars and keys
        out = {k: flat[k] for k in FLAT_ORDER}
        # Expert files only when given, so the result keys of runs without them stay as they were.
        out.update(self.weights.expert_files())
        # A source video only when given (video-to-video), with its strength: keys of others stay.
        if self.video.video is not None:
            out.update(video=self.video.video, strength=self.video.strength)
        if self.video.extend is not None:
            out["extend"] = self.video.extend
        if self.video.last_image is not None:  # first-last-frame video only: the keys of others stay
            out["last_image"] = self.video.last_image
        if self.video.animate is not None:  # Animate only: its driving videos, mode and segment overlap
            a = self.video.animate
            out.update(
                {k: getattr(a, k) for k in ANIMATE_SETTINGS if getattr(a, k) is not None},
            )
        if self.video.s2v is not None:  # S2V only: its audio and clip cap
            out["audio"] = self.video.s2v.audio
            if self.video.s2v.pose_video is not None:
                out["pose_video"] = self.video.s2v.pose_video
            if self.video.s2v.num_clips is not None:
                out["num_clips"] = self.video.s2v.num_clips
        # The same for sequence_parallel (xfuser only; jobs/keys.py hashes it as attention_impl=xfuser).
        if self.execution.sequence_parallel != "ours":
            out["sequence_parallel"] = self.execution.sequence_parallel
        # Sparse attention only when on (it changes the video): the keys of dense runs stay.
        if self.sparse_attention.on:
            out.update(self.sparse_attention.record())
        return out


# Animate's settings as to_dict records them (config/animate_inputs.AnimateInputs' fields)
ANIMATE_SETTINGS = ("pose_video", "face_video", "mode", "background_video", "mask_video", "prev_segment_frames")
ANIMATE_VIDEOS = ("pose_video", "face_video", "background_video", "mask_video")

# Command-line name → (section, field) for every sectioned setting.
SECTION_OF = {
    **{f: ("video", f) for f in ("prompts", "negative_prompt", "image", "seed", "num_frames", "height", "width")},
    **{
        f: ("sampling", f)
        for f in (
            "steps",
            "guidance_high",
            "guidance_low",
            "shift",
            "sampler",
            "schedule",
            "sigmas",
            "timesteps",
            "recipe",
        )
    },
    "checkpoint_dir": ("weights", "checkpoint_dir"),
    "loras": ("weights", "loras"),
    "weights_cache_dir": ("weights", "cache_dir"),
    # expert files (config/expert_files.py)
    "weights": ("weights", "file"),
    "weights_high": ("weights", "file_high"),
    "weights_low": ("weights", "file_low"),
    "memory": ("memory", "mode"),
    "swap_prefetch_steps": ("memory", "swap_prefetch_steps"),
    **{
        f: ("execution", f)
        for f in (
            "backend",
            "device",
            "dtype",
            "attention_impl",
            "sequence_parallel",
            "compile",
            "scan_loop",
            "dist_timeout_s",
            "compile_cache",
        )
    },
    "output_dir": ("output", "dir"),
    "save_frames": ("output", "save_frames"),
    "log_all_ranks": ("output", "log_all_ranks"),
    "quantize": ("quantization", "quantize"),
    "quant_compute": ("quantization", "compute"),
    "sparse": ("sparse_attention", "kind"),
    "sparse_dense_steps": ("sparse_attention", "dense_steps"),
    "sparse_dense_layers": ("sparse_attention", "dense_layers"),
    "sparse_decay_factor": ("sparse_attention", "decay_factor"),
    "sparse_density": ("sparse_attention", "density"),
    "sparse_block": ("sparse_attention", "block"),
}


# The sidecar's "config" in the order the settings had when RunSpec was flat. The result keys
# hash the same names and values (jobs/keys.py; key order does not enter the hash), so names
# made and sidecars written before the sections still match.
FLAT_ORDER = (
    "model",
    "mesh",
    "backend",
    "prompts",
    "negative_prompt",
    "image",
    "seed",
    "num_frames",
    "height",
    "width",
    "steps",
    "guidance_high",
    "guidance_low",
    "shift",
    "sampler",
    "schedule",
    "dtype",
    "device",
    "checkpoint_dir",
    "output_dir",
    "save_frames",
    "attention_impl",
    "dist_timeout_s",
    "log_all_ranks",
    "scan_loop",
    "jax_fsdp",
    "weights_cache_dir",
    "memory",
    "swap_prefetch_steps",
    "compile",
    "cache",
    "sigmas",
    "timesteps",
    "recipe",
    "loras",
    "quantize",
    "quant_compute",
)


def _pick(cfg: Mapping, key: str, default: Any) -> Any:
    """A setting whose null in conf/config.yaml means `default` (the model preset's value, or a
    value made per run such as the output folder)."""
    value = _setting(cfg, key)
    return default if value is None else value


def _setting(cfg: Mapping, key: str, name: str | None = None) -> Any:
    """A setting as composed: conf/config.yaml is the one home of defaults, so every key is there."""
    if key not in cfg:
        raise ConfigError(
            f"{name or key} is missing from the settings; compose them with parallel_wan.config.compose "
            "(conf/config.yaml holds every default)"
        )
    return cfg[key]


def _as(kind, key: str, value):
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}={value!r} is not a boolean; set {key}=true or {key}=false", setting=key)
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{key}={value!r} is not a whole number; set e.g. {key}=42", setting=key)
        if not -INT_LIMIT <= value < INT_LIMIT:  # torch, numpy and the JSON sidecar hold 64-bit integers
            raise ConfigError(f"{key}={value} does not fit in a 64-bit integer; set a smaller {key}", setting=key)
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}={value!r} is not a number; set e.g. {key}=5.0", setting=key)
        if not math.isfinite(value):  # nan/inf would run and render noise (or hang a schedule)
            raise ConfigError(f"{key}={value} is not a finite number; set e.g. {key}=5.0", setting=key)
        return float(value)
    if not isinstance(value, str):
        raise ConfigError(f"{key}={value!r} must be a string", setting=key)
    return value


def _choice(key: str, value: str, options) -> str:
    if value not in options:
        raise ConfigError(f"{key}={value!r} is not known; choose one of: {', '.join(options)}", setting=key)
    return value


def model_preset(cfg: Mapping) -> ModelPreset:
    fields = {f.name: f for f in dataclasses.fields(ModelPreset)}
    unknown = set(cfg) - set(fields)
    if unknown:
        raise ConfigError(f"model preset has unknown keys {sorted(unknown)}; known: {sorted(fields)}")
    cfg = {**cfg, **architecture_facts(cfg)}
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
    _choice("model.sampler", preset.sampler, SAMPLERS)
    explicit = preset.sigmas if preset.sigmas is not None else preset.timesteps
    if explicit is not None and len(explicit) != preset.steps:
        raise ConfigError(
            f"model preset {preset.name}: steps={preset.steps} but {len(explicit)} explicit "
            "sigmas/timesteps; make them agree"
        )
    if preset.experts == 2 and preset.boundary is None:
        raise ConfigError(f"model {preset.name}: two experts need model.boundary (e.g. 0.875)")
    return preset


def preset_architecture(cfg: Mapping):
    """The registered architecture (models/registry.py) a preset's settings name: its
    `architecture`, else the one of its own name."""
    from ..models.registry import ARCHITECTURES

    name = cfg.get("architecture") or cfg.get("name")
    if name not in ARCHITECTURES:
        raise ConfigError(
            f"model.architecture={name!r} is not a registered architecture (models/registry.py); "
            f"set it to one of: {', '.join(sorted(ARCHITECTURES))}"
        )
    return ARCHITECTURES[name]


def architecture_facts(cfg: Mapping) -> dict:
    """What a preset's architecture decides ({architecture, task, experts, size_multiple}). A
    preset that states one of them anyway must agree."""
    from ..models.latent import size_multiple

    arch = preset_architecture(cfg)
    facts = {
        "architecture": arch.name,
        "task": arch.variant.task,
        "experts": len(arch.variant.experts),
        "size_multiple": size_multiple(arch.transformer, arch.vae),
    }
    for key, value in facts.items():
        if cfg.get(key) not in (None, "", value):
            raise ConfigError(
                f"model.{key}={cfg[key]!r} but architecture {arch.name} has {value!r}; "
                f"drop model.{key} (the architecture decides it)"
            )
    return facts
