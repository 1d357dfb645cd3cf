"""The run's typed settings: Hydra's composed config → a validated `RunSpec`.

Everything here is cheap (no torch import, no weights) so a bad value stops the run in a
second, with one line naming the setting, the value seen and what to set instead, before
anything heavy loads or any output is written.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Mapping

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


class ConfigError(ValueError):
    """A setting is wrong; the message is one line a user can act on."""


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


@dataclass(frozen=True)
class MeshSpec:
    """world = dp × cp, cp = ring × ulysses. Rank order: dp outermost, then ring, ulysses
    innermost, so an all-to-all stays within consecutive ranks (one node's NVLink, one chip's
    ICI) and only the ring crosses nodes."""

    name: str = "single"
    dp: int = 1
    cp: int = 1
    ulysses: int = 1
    ring: int = 1

    @property
    def world_size(self) -> int:
        return self.dp * self.cp

    def coords(self, rank: int) -> dict[str, int]:
        """This rank's index along each axis (and its index within cp)."""
        return {
            "dp": rank // self.cp,
            "cp": rank % self.cp,
            "ring": (rank % self.cp) // self.ulysses,
            "ulysses": rank % self.ulysses,
        }

    def groups(self, axis: str) -> list[list[int]]:
        """Every group of ranks that varies only along `axis` ("dp", "cp", "ring", "ulysses")."""
        others = {"dp": ("ring", "ulysses"), "cp": ("dp",), "ring": ("dp", "ulysses"), "ulysses": ("dp", "ring")}[axis]
        out: dict[tuple, list[int]] = {}
        for rank in range(self.world_size):
            c = self.coords(rank)
            out.setdefault(tuple(c[k] for k in others), []).append(rank)
        return list(out.values())


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
    weights_cache_dir: str | None = None  # converted-weights cache (weights/cache.py); None: off
    memory: str = "resident"  # resident | sharded | swap (MEMORY_MODES)
    swap_prefetch_steps: int = 0  # memory=swap: 0 = exchange block by block in the last high-noise step; n = copy the whole expert from n steps before
    compile: bool = False  # torch: torch.compile each transformer block, q/k/v fused (backends/torch/qkv_fusion.py, runners/compiled.py)

    @property
    def uses_guidance(self) -> bool:
        return self.guidance_high != 1.0 or (self.model.experts == 2 and self.guidance_low != 1.0)

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
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}={value!r} is not a number; set e.g. {key}=5.0")
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
    preset = ModelPreset(**dict(cfg))
    _choice("model.task", preset.task, TASKS)
    if preset.experts not in (1, 2):
        raise ConfigError(f"model.experts={preset.experts} must be 1 or 2")
    if preset.experts == 2 and preset.boundary is None:
        raise ConfigError(f"model {preset.name}: two experts need model.boundary (e.g. 0.875)")
    return preset


def mesh_spec(cfg: Mapping, world_size: int = 1, heads: int | None = None, backend: str = "torch") -> MeshSpec:
    """Validate the mesh degrees against each other, the world size and (when known) the
    attention head count. For torch the world size is the number of processes and must equal
    dp×cp; for JAX (one process drives every local device) it is the number of devices, and a
    mesh may use the first dp×cp of them."""
    known = ("name", "dp", "cp", "ulysses", "ring")
    unknown = set(cfg) - set(known)
    if unknown:
        raise ConfigError(f"mesh has unknown keys {sorted(unknown)}; a mesh sets {', '.join(known)}")
    mesh = MeshSpec(**{k: cfg[k] for k in known if k in cfg})
    name = f"mesh={mesh.name}"
    for axis in ("dp", "cp", "ulysses", "ring"):
        value = getattr(mesh, axis)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name}: mesh.{axis}={value!r} must be a whole number ≥ 1")
    if mesh.cp != mesh.ulysses * mesh.ring:
        raise ConfigError(
            f"{name}: cp={mesh.cp} must equal ulysses×ring={mesh.ulysses}×{mesh.ring}={mesh.ulysses * mesh.ring}; "
            f"set mesh.ulysses and mesh.ring so their product is {mesh.cp}"
        )
    if backend == "jax":
        _check_jax_devices(mesh, world_size)
    elif mesh.world_size != world_size:
        launch = f"torchrun --nproc-per-node {mesh.world_size} -m parallel_wan.run mesh={mesh.name}"
        raise ConfigError(
            f"{name} needs dp×cp={mesh.dp}×{mesh.cp}={mesh.world_size} processes but {world_size} were started; "
            + (f"launch with `{launch}`" if mesh.world_size > 1 else "run without torchrun or pick a mesh for this world size")
        )
    if heads is not None and heads % mesh.ulysses:
        fits = [u for u in range(1, mesh.cp + 1) if mesh.cp % u == 0 and heads % u == 0]
        u = max(fits)
        raise ConfigError(
            f"{name}: ulysses={mesh.ulysses} does not divide the model's {heads} attention heads; "
            f"use mesh.ulysses={u} mesh.ring={mesh.cp // u} (ring has no head limit)"
        )
    return mesh


def _check_jax_devices(mesh: MeshSpec, devices: int) -> None:
    if mesh.world_size > devices:
        raise ConfigError(
            f"mesh={mesh.name} needs dp×cp={mesh.dp}×{mesh.cp}={mesh.world_size} JAX devices but {devices} "
            f"{'is' if devices == 1 else 'are'} visible; pick a smaller mesh, or on CPU set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={mesh.world_size} before starting"
        )


def backend_name(cfg: Mapping) -> str:
    """The `backend` choice of a composed config, validated (cheap: run.py needs it before
    it knows how to count the world)."""
    return _choice("backend", str(_pick(cfg.get("backend") or {}, "name", "torch")), BACKENDS)


def resolve(cfg: Mapping, world_size: int = 1) -> RunSpec:
    """Validate the composed config and fill model defaults. Raises ConfigError.
    `world_size`: processes started (torch), or JAX devices visible (backend=jax)."""
    model = model_preset(cfg["model"])
    backend = backend_name(cfg)
    mesh = mesh_spec(cfg.get("mesh") or {}, world_size, backend=backend)

    num_frames = _as(int, "num_frames", _pick(cfg, "num_frames", model.num_frames))
    height = _as(int, "height", _pick(cfg, "height", model.height))
    width = _as(int, "width", _pick(cfg, "width", model.width))
    steps = _as(int, "steps", _pick(cfg, "steps", model.steps))
    guidance_high = _as(float, "guidance_high", _pick(cfg, "guidance_high", model.guidance_high))
    guidance_low = _as(float, "guidance_low", _pick(cfg, "guidance_low", model.guidance_low))
    shift = _as(float, "shift", _pick(cfg, "shift", model.shift))
    seed = _as(int, "seed", _pick(cfg, "seed", 0))

    if num_frames < 1 or num_frames % 4 != 1:
        near = max(1, 4 * round((num_frames - 1) / 4) + 1)
        raise ConfigError(f"num_frames={num_frames} must be 4k+1 (the VAE's temporal stride is 4); try num_frames={near}")
    m = model.size_multiple
    for key, value in (("height", height), ("width", width)):
        if value < m or value % m:
            near = max(m, m * round(value / m))
            raise ConfigError(f"{key}={value} must be a positive multiple of {m} for {model.name}; try {key}={near}")
    if steps < 1:
        raise ConfigError(f"steps={steps} must be at least 1")
    for key, value in (("guidance_high", guidance_high), ("guidance_low", guidance_low)):
        if value < 0:
            raise ConfigError(f"{key}={value} is negative; guidance scales are ≥ 0 (1.0 turns guidance off)")
    if shift <= 0:
        raise ConfigError(f"shift={shift} must be positive (official: 12.0 for T2V-A14B, 5.0 otherwise)")
    if seed < 0:
        raise ConfigError(f"seed={seed} must be ≥ 0")

    image = cfg.get("image")
    if model.task == "i2v" and not image:
        raise ConfigError(f"model={model.name} generates from an image; set image=PATH (a PNG/JPEG)")
    if image:
        image = _as(str, "image", image)
        if model.task == "t2v":
            raise ConfigError(f"image={image} was given but model={model.name} is text-to-video; drop image= or use an i2v/ti2v model")
        _check_image_readable(image)

    checkpoint_dir = cfg.get("checkpoint_dir")
    if checkpoint_dir:
        checkpoint_dir = os.path.abspath(os.path.expanduser(_as(str, "checkpoint_dir", checkpoint_dir)))
        if not os.path.isdir(checkpoint_dir):
            raise ConfigError(f"checkpoint_dir={checkpoint_dir} is not a folder; point it at a Wan 2.2 checkpoint (diffusers or official layout)")
    elif not model.builtin:
        raise ConfigError(
            f"model={model.name} needs its weights: set checkpoint_dir=DIR (diffusers or official layout), "
            "or run the built-in tiny model with model=tiny"
        )

    dtype = _choice("dtype", str(_pick(cfg, "dtype", "bfloat16")), DTYPES)
    attention_impl = _choice("attention_impl", str(_pick(cfg, "attention_impl", "ours")), ATTENTION_IMPLS)
    if attention_impl == "xfuser" and backend != "torch":
        raise ConfigError(f"attention_impl=xfuser is a PyTorch (CUDA) kernel but backend={backend}; use attention_impl=ours")
    uses_guidance = guidance_high != 1.0 or (model.experts == 2 and guidance_low != 1.0)
    prompts = _prompts(cfg.get("prompt"))
    memory, jax_fsdp, swap_prefetch_steps = _memory(cfg, backend, model)
    if mesh.dp > 1:
        if len(prompts) == 1 and not (mesh.dp == 2 and uses_guidance):
            raise ConfigError(
                f"mesh={mesh.name} has dp={mesh.dp} but one prompt: dp then carries the two CFG halves, which needs "
                f"dp=2 and guidance on; give {mesh.dp}·k prompts (prompt=[\"…\",\"…\"]) or use a mesh with dp=1"
            )
        if len(prompts) > 1 and len(prompts) % mesh.dp:
            raise ConfigError(
                f"mesh={mesh.name} splits prompts over dp={mesh.dp} but {len(prompts)} prompts were given; "
                f"give a multiple of {mesh.dp} prompts"
            )
    return RunSpec(
        model=model,
        mesh=mesh,
        backend=backend,
        prompts=prompts,
        negative_prompt=None if cfg.get("negative_prompt") is None else _as(str, "negative_prompt", cfg["negative_prompt"]),
        image=image or None,
        seed=seed,
        num_frames=num_frames,
        height=height,
        width=width,
        steps=steps,
        guidance_high=guidance_high,
        guidance_low=guidance_low,
        shift=shift,
        sampler=_choice("sampler", str(_pick(cfg, "sampler", "unipc")), SAMPLERS),
        schedule=_choice("schedule", str(_pick(cfg, "schedule", "auto")), SCHEDULES),
        dtype=dtype,
        device=_as(str, "device", _pick(cfg, "device", "auto")),
        checkpoint_dir=checkpoint_dir or None,
        output_dir=os.path.abspath(_as(str, "output_dir", _pick(cfg, "output_dir", "outputs"))),
        save_frames=_as(bool, "save_frames", _pick(cfg, "save_frames", False)),
        attention_impl=attention_impl,
        dist_timeout_s=_positive("dist_timeout_s", _as(float, "dist_timeout_s", _pick(cfg, "dist_timeout_s", 600.0))),
        log_all_ranks=_as(bool, "log_all_ranks", _pick(cfg, "log_all_ranks", False)),
        scan_loop=_jax_only(cfg, backend, "scan_loop"),
        jax_fsdp=jax_fsdp,
        weights_cache_dir=_cache_dir(cfg.get("weights_cache_dir")),
        memory=memory,
        swap_prefetch_steps=swap_prefetch_steps,
        compile=_torch_compile(cfg, backend),
    )


def _jax_only(cfg: Mapping, backend: str, key: str) -> bool:
    value = _as(bool, key, _pick(cfg, key, False))
    if value and backend != "jax":
        raise ConfigError(f"{key}=true is a JAX backend setting but backend={backend}; add backend=jax or drop {key}")
    return value


def _torch_compile(cfg: Mapping, backend: str) -> bool:
    value = _as(bool, "compile", _pick(cfg, "compile", False))
    if value and backend != "torch":
        raise ConfigError(f"compile=true asks torch.compile for the PyTorch backend, but backend={backend} compiles "
                          "every step already (XLA); drop compile=true")
    return value


def _memory(cfg: Mapping, backend: str, model: ModelPreset) -> tuple[str, bool, int]:
    """(memory, jax_fsdp, swap_prefetch_steps). On JAX, memory=sharded IS jax_fsdp (weights
    sharded by NamedSharding, gathered one layer at a time inside the scan); the older
    jax_fsdp=true still works and means memory=sharded."""
    memory = _choice("memory", str(_pick(cfg, "memory", "resident")), MEMORY_MODES)
    jax_fsdp = _jax_only(cfg, backend, "jax_fsdp")
    prefetch = _as(int, "swap_prefetch_steps", _pick(cfg, "swap_prefetch_steps", 0))
    if prefetch < 0:
        raise ConfigError(f"swap_prefetch_steps={prefetch} must be ≥ 0: 0 exchanges the experts block by block during "
                          "the last high-noise step, n ≥ 1 copies the low-noise expert whole from n steps before the switch")
    if jax_fsdp:
        if memory == "swap":
            raise ConfigError("jax_fsdp=true shards the weights but memory=swap was asked; pick one: "
                              "memory=sharded (same as jax_fsdp=true) or memory=swap without jax_fsdp")
        memory = "sharded"
    if memory == "sharded" and backend == "jax":
        jax_fsdp = True
    if memory == "swap":
        if model.experts != 2:
            raise ConfigError(f"memory=swap swaps the high-noise expert for the low-noise one, but model={model.name} "
                              "has one expert; use memory=resident or memory=sharded")
        if backend == "jax":
            raise ConfigError("memory=swap is implemented for backend=torch only; on JAX use memory=sharded "
                              "(weights sharded over the mesh) or memory=resident")
    return memory, jax_fsdp, prefetch


def _cache_dir(value) -> str | None:
    """weights_cache_dir: a folder that exists or can be made, and is writable (checked now, not
    after minutes of loading)."""
    if value is None or value == "":
        return None
    path = os.path.abspath(os.path.expanduser(_as(str, "weights_cache_dir", value)))
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ConfigError(f"weights_cache_dir={path}: {existing} is a file, not a folder; point it at a folder "
                          "for the converted-weights cache, or set weights_cache_dir=null")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"weights_cache_dir={path}: {existing} is not writable; pick a writable folder "
                          "or set weights_cache_dir=null")
    return path


def _prompts(value) -> tuple[str, ...]:
    """`prompt` is one string, or a list of strings (one video each)."""
    if value is None:
        return ("",)
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)) and value and all(isinstance(p, str) for p in value):
        return tuple(value)
    raise ConfigError(f"prompt={value!r} must be a string or a non-empty list of strings, e.g. prompt='[\"a cat\",\"a dog\"]'")


def _positive(key: str, value: float) -> float:
    if value <= 0:
        raise ConfigError(f"{key}={value} must be positive")
    return value


def _check_image_readable(path: str) -> None:
    if not os.path.isfile(path):
        raise ConfigError(f"image={path} does not exist; give the path of a PNG or JPEG file")
    try:
        from PIL import Image

        with Image.open(path) as im:
            im.verify()
    except Exception as exc:  # PIL raises many types for bad files
        raise ConfigError(f"image={path} could not be read as an image ({type(exc).__name__}: {exc}); give a PNG or JPEG") from None
