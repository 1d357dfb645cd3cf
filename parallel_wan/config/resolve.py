"""Hydra's composed config → a validated `RunSpec`.

Everything here is cheap (no torch import, no weights) so a bad value stops the run in a
second, with one line naming the setting, the value seen and what to set instead, before
anything heavy loads or any output is written. The mesh is checked by parallel/mesh.py.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import NamedTuple

from ..backends.capabilities import capabilities
from ..caching.settings import cache_settings
from ..errors import ConfigError
from ..lora.settings import lora_settings
from ..models import latent
from ..models.registry import architecture
from ..models.variants import AUDIO, IMAGE, LAST_IMAGE
from ..parallel.mesh import mesh_spec
from .animate_inputs import animate_inputs, check_animate_run, with_examples
from .attention import attention_settings
from .checks import check_known_keys, check_seed, writable_folder
from .expert_files import expert_file_settings
from .few_step import explicit_schedule_settings
from .quantization import quant_settings
from .s2v_inputs import check_s2v_run, s2v_inputs, with_examples as with_s2v_examples
from .schema import (
    BACKENDS,
    DTYPES,
    MEMORY_MODES,
    SAMPLERS,
    SCHEDULES,
    ExecutionSettings,
    MemorySettings,
    ModelPreset,
    OutputSettings,
    RunSpec,
    SamplingSettings,
    VideoSettings,
    WeightSettings,
    _as,
    _choice,
    _pick,
    _setting,
    guides_every_step,
    model_preset,
    uses_guidance,
)
from .source_video import extension, source_video
from .sparse import check_sparse_run, sparse_settings


def backend_name(cfg: Mapping) -> str:
    """The `backend` choice of a composed config, validated (cheap: run.py needs it before
    it knows how to count the world): torch, jax, or auto (run.py decides: launch/backend_choice.py)."""
    return _choice("backend", str(_setting(cfg.get("backend") or {}, "name", "backend.name")), BACKENDS + ("auto",))


def resolve(cfg: Mapping, world_size: int = 1, node_size: int | None = None) -> RunSpec:
    """Validate the composed config and fill model defaults. Raises ConfigError.
    `world_size`: processes started (torch), or JAX devices visible (backend=jax); `node_size`:
    processes per node (mesh=auto keeps Ulysses inside one).

    The steps run in the order the checks have always fired, so that with several settings wrong
    the first refusal a user sees stays the same (tests/unit/test_refusal_order.py holds it):
    that is why a few parts of a section (the numbers, the image, the prompts) are read before
    the function that assembles it."""
    check_known_keys(cfg)
    model = _model(cfg)
    backend = _backend(cfg)
    mesh_cfg = dict(cfg.get("mesh") or {})
    named_mesh = _named_mesh(mesh_cfg, world_size, backend)
    source, strength, source_frames = source_video(cfg, model, cfg.get("image") or None)
    extend, _ = extension(cfg, model, cfg.get("image") or None)
    if source is not None and cfg.get("num_frames") is None:  # all of the source the VAE can take
        cfg = {**cfg, "num_frames": latent.frames_at_most(source_frames, architecture(model.architecture).vae)}
    numbers = _numbers(cfg, model)
    if source_frames is not None and numbers.num_frames > source_frames:
        raise ConfigError(
            f"num_frames={numbers.num_frames} but video={source} has {source_frames} frames; set num_frames="
            f"{latent.frames_at_most(source_frames, architecture(model.architecture).vae)} or fewer",
            setting=("num_frames", "video"),
        )
    cfg = with_examples(cfg, model)  # model=tiny_animate alone: the built-in example inputs
    cfg = with_s2v_examples(cfg, model)  # model=tiny_s2v alone: its example portrait and speech
    image = _image(cfg, model)
    last_image = _last_image(cfg, model, numbers.num_frames)
    animate = animate_inputs(cfg, model, numbers.num_frames)
    s2v = s2v_inputs(cfg, model, numbers.num_frames)
    if source is not None and int(numbers.steps * strength) < 1:
        raise ConfigError(
            f"strength={strength} of steps={numbers.steps} runs no step (diffusers' rule: int(steps·strength) "
            f"steps run); set strength={1 / numbers.steps:.3g} or more, or more steps",
            setting=("strength", "steps"),
        )
    checkpoint_dir, files = _weight_sources(cfg, model)
    dtype, attention = _choice("dtype", str(_setting(cfg, "dtype")), DTYPES), attention_settings(cfg, backend)
    prompts = _prompts(cfg.get("prompt"))
    check_seed(numbers.seed, len(prompts))
    memory = _memory(cfg, backend, model)
    quantization = quant_settings(cfg, backend, expert_files=any(files.values()))
    sparse = sparse_settings(cfg, backend, attention.sequence_parallel)
    mesh = named_mesh or _auto_mesh(mesh_cfg, model, world_size, numbers, len(prompts), node_size, backend)
    _check_dp(mesh, model, numbers, len(prompts))
    spec = RunSpec(
        model=model,
        mesh=mesh,
        video=_video(cfg, numbers, image, prompts, source, strength, extend, last_image, animate, s2v),
        sampling=_sampling(cfg, model, numbers),
        cache=_cache(cfg, model, image or extend, backend, numbers.guidance_high, numbers.guidance_low),
        weights=_weights(cfg, model, checkpoint_dir, files),
        memory=memory,
        execution=_execution(cfg, backend, dtype, attention),
        output=_output(cfg),
        quantization=quantization,
        sparse_attention=sparse,
    )
    check_animate_run(spec)
    check_s2v_run(spec)
    check_sparse_run(spec)
    return spec


class _Numbers(NamedTuple):
    """The video's size and seed and the sampling's numbers, as given or the preset's."""

    num_frames: int
    height: int
    width: int
    steps: int
    sigmas: tuple | None
    timesteps: tuple | None
    guidance_high: float
    guidance_low: float
    shift: float
    seed: int


def _model(cfg: Mapping) -> ModelPreset:
    # recipe= lays a few-step recipe over the preset (config/few_step.py); the keys below override both
    recipe = cfg.get("recipe")
    model = model_preset(cfg["model"] if recipe is None else {**cfg["model"], "recipe": _as(str, "recipe", recipe)})
    return _with_run_overrides(cfg, model)


MAX_FPS = 240


def _with_run_overrides(cfg: Mapping, model: ModelPreset) -> ModelPreset:
    """`fps=` (the mp4's frame rate) and `boundary=` (A14B: where the low-noise expert takes
    over) replace the preset's values in the run's model record, so every reader of spec.model
    (the writer, the step plan, the swap's schedule) sees one value, and a run at the preset's
    values keeps its result key. null: the preset's."""
    changes = {}
    if cfg.get("fps") is not None:
        fps = _as(int, "fps", cfg["fps"])
        if not 1 <= fps <= MAX_FPS:
            raise ConfigError(
                f"fps={fps} must be 1 to {MAX_FPS} frames per second (model={model.name}'s own: {model.fps})",
                setting="fps",
            )
        changes["fps"] = fps
    if cfg.get("boundary") is not None:
        boundary = _as(float, "boundary", cfg["boundary"])
        if model.experts != 2:
            raise ConfigError(
                f"boundary={boundary} picks where the low-noise expert takes over, but model={model.name} has "
                "one expert; drop boundary=",
                setting="boundary",
            )
        if not 0.0 < boundary < 1.0:
            raise ConfigError(
                f"boundary={boundary} must be between 0 and 1, both excluded (model={model.name}'s own: "
                f"{model.boundary}; steps with t ≥ boundary·1000 run the high-noise expert)",
                setting="boundary",
            )
        changes["boundary"] = boundary
    return dataclasses.replace(model, **changes) if changes else model


def _backend(cfg: Mapping) -> str:
    backend = backend_name(cfg)
    # run.py decides backend=auto from the launcher and the host's devices before it gets
    # here (launch/backend_choice.py); other callers (the planner, tests) plan for torch.
    return "torch" if backend == "auto" else backend


def _named_mesh(mesh_cfg: Mapping, world_size: int, backend: str):
    """The mesh as named and sized; None for mesh=auto (picked once the prompts are known)."""
    if mesh_cfg.get("name") == "auto":
        return None
    return mesh_spec(mesh_cfg, world_size, single_controller=capabilities(backend).single_controller)


def _numbers(cfg: Mapping, model: ModelPreset) -> _Numbers:
    """Every number read (a value of the wrong type is refused first), then checked against the
    model. conf/config.yaml holds every default; a null there means "the model preset's"."""
    num_frames = _as(int, "num_frames", _pick(cfg, "num_frames", model.num_frames))
    height = _as(int, "height", _pick(cfg, "height", model.height))
    width = _as(int, "width", _pick(cfg, "width", model.width))
    sigmas, timesteps, steps = explicit_schedule_settings(
        {**cfg, "steps": None if cfg.get("steps") is None else _as(int, "steps", cfg["steps"])},
        model.sigmas,
        model.timesteps,
        model.steps,
    )
    numbers = _Numbers(
        num_frames=num_frames,
        height=height,
        width=width,
        steps=steps,
        sigmas=sigmas,
        timesteps=timesteps,
        guidance_high=_as(float, "guidance_high", _pick(cfg, "guidance_high", model.guidance_high)),
        guidance_low=_as(float, "guidance_low", _pick(cfg, "guidance_low", model.guidance_low)),
        shift=_as(float, "shift", _pick(cfg, "shift", model.shift)),
        seed=_as(int, "seed", _setting(cfg, "seed")),
    )
    _check_size(numbers, model)
    _check_sampling(numbers)
    return numbers


def _check_size(numbers: _Numbers, model: ModelPreset) -> None:
    arch = architecture(model.architecture)
    vae = arch.vae
    # S2V's num_frames is a clip length, a multiple of 4 (config/s2v_inputs.py checks it)
    if arch.variant.input(AUDIO) is None and not latent.frames_fit(numbers.num_frames, vae):
        stride = vae.scale_factor_temporal
        raise ConfigError(
            f"num_frames={numbers.num_frames} must be {stride}k+1 (the VAE's temporal stride is {stride}); "
            f"try num_frames={latent.nearest_frames(numbers.num_frames, vae)}",
            setting="num_frames",
        )
    m = model.size_multiple
    for key, value in (("height", numbers.height), ("width", numbers.width)):
        if value < m or value % m:
            near = max(m, m * round(value / m))
            raise ConfigError(
                f"{key}={value} must be a positive multiple of {m} for {model.name}; try {key}={near}", setting=key
            )


def _check_sampling(numbers: _Numbers) -> None:
    if numbers.steps < 1:
        raise ConfigError(f"steps={numbers.steps} must be at least 1", setting="steps")
    for key, value in (("guidance_high", numbers.guidance_high), ("guidance_low", numbers.guidance_low)):
        if value < 0:
            raise ConfigError(
                f"{key}={value} is negative; guidance scales are ≥ 0 (1.0 turns guidance off)", setting=key
            )
    if numbers.shift <= 0:
        raise ConfigError(
            f"shift={numbers.shift} must be positive (official: 12.0 for T2V-A14B, 5.0 otherwise)", setting="shift"
        )


def _image(cfg: Mapping, model: ModelPreset) -> str | None:
    """image=: required by a variant that needs one, refused by one that takes none, readable."""
    image = cfg.get("image")
    takes_image = architecture(model.architecture).variant.input(IMAGE)
    if takes_image is not None and takes_image.required and not image and not cfg.get("extend"):
        raise ConfigError(
            f"model={model.name} generates from an image; set image=PATH (a PNG/JPEG)", setting=("model", "image")
        )
    if not image:
        return None
    image = _as(str, "image", image)
    if takes_image is None:
        raise ConfigError(
            f"image={image} was given but model={model.name} is text-to-video; drop image= or use an i2v/ti2v model",
            setting=("image", "model"),
        )
    _check_image_readable(image)
    return image


def _weight_sources(cfg: Mapping, model: ModelPreset) -> tuple[str | None, dict]:
    """(checkpoint_dir, expert files): where the weights come from."""
    checkpoint_dir = cfg.get("checkpoint_dir")
    if checkpoint_dir:
        checkpoint_dir = os.path.abspath(os.path.expanduser(_as(str, "checkpoint_dir", checkpoint_dir)))
        if not os.path.isdir(checkpoint_dir):
            raise ConfigError(
                f"checkpoint_dir={checkpoint_dir} is not a folder; point it at a Wan 2.2 checkpoint (diffusers or "
                "official layout)",
                setting="checkpoint_dir",
            )
    elif not model.builtin:
        raise ConfigError(
            f"model={model.name} needs its weights: set checkpoint_dir=DIR (diffusers or official layout), "
            "or run the built-in tiny model with model=tiny",
            setting=("model", "checkpoint_dir"),
        )
    files = expert_file_settings(cfg, model.experts, model.name)
    if any(files.values()) and not checkpoint_dir:
        key = next(k for k, v in files.items() if v)
        raise ConfigError(
            f"{key}={files[key]} replaces an expert of a checkpoint, but no checkpoint_dir is set; "
            "set checkpoint_dir=DIR (it still gives the VAE, text encoder, tokenizer and configs)",
            setting=(key, "checkpoint_dir"),
        )
    return checkpoint_dir or None, files


def _check_dp(mesh, model: ModelPreset, numbers: _Numbers, prompts: int) -> None:
    """dp > 1 splits the prompts, or with one prompt carries the two CFG halves."""
    if mesh.dp <= 1:
        return
    guided = uses_guidance(numbers.guidance_high, numbers.guidance_low, model.experts)
    if prompts == 1 and not (mesh.dp == 2 and guided):
        raise ConfigError(
            f"mesh={mesh.name} has dp={mesh.dp} but one prompt: dp then carries the two CFG halves, which needs "
            f'dp=2 and guidance on; give {mesh.dp}·k prompts (prompt=["…","…"]) or use a mesh with dp=1',
            setting=("mesh", "prompt"),
        )
    if prompts == 1:
        _check_cfg_parallel(mesh, model, numbers.guidance_high, numbers.guidance_low)
    if prompts > 1 and prompts % mesh.dp:
        raise ConfigError(
            f"mesh={mesh.name} splits prompts over dp={mesh.dp} but {prompts} prompts were given; "
            f"give a multiple of {mesh.dp} prompts",
            setting=("mesh", "prompt"),
        )


def _video(
    cfg: Mapping,
    numbers: _Numbers,
    image: str | None,
    prompts: tuple[str, ...],
    source: str | None,
    strength: float,
    extend: str | None,
    last_image: str | None = None,
    animate=None,
    s2v=None,
) -> VideoSettings:
    negative = cfg.get("negative_prompt")
    return VideoSettings(
        video=source,
        strength=strength,
        extend=extend,
        last_image=last_image,
        animate=animate,
        s2v=s2v,
        prompts=prompts,
        negative_prompt=None if negative is None else _as(str, "negative_prompt", negative),
        image=image,
        seed=numbers.seed,
        num_frames=numbers.num_frames,
        height=numbers.height,
        width=numbers.width,
    )


def _sampling(cfg: Mapping, model: ModelPreset, numbers: _Numbers) -> SamplingSettings:
    return SamplingSettings(
        steps=numbers.steps,
        guidance_high=numbers.guidance_high,
        guidance_low=numbers.guidance_low,
        shift=numbers.shift,
        sampler=_choice("sampler", str(_pick(cfg, "sampler", model.sampler)), SAMPLERS),
        schedule=_choice("schedule", str(_setting(cfg, "schedule")), SCHEDULES),
        sigmas=numbers.sigmas,
        timesteps=numbers.timesteps,
        recipe=model.recipe,
    )


def _weights(cfg: Mapping, model: ModelPreset, checkpoint_dir: str | None, files: dict) -> WeightSettings:
    return WeightSettings(
        checkpoint_dir=checkpoint_dir,
        loras=lora_settings(cfg, model.experts, model.name),
        cache_dir=_cache_dir(cfg.get("weights_cache_dir")),
        file=files["weights"],
        file_high=files["weights_high"],
        file_low=files["weights_low"],
    )


def _execution(cfg: Mapping, backend: str, dtype: str, attention) -> ExecutionSettings:
    return ExecutionSettings(
        backend=backend,
        device=_as(str, "device", _setting(cfg, "device")),
        dtype=dtype,
        attention_impl=attention.attention_impl,
        sequence_parallel=attention.sequence_parallel,
        sequence_parallel_set_by=attention.sequence_parallel_set_by,
        compile=_torch_compile(cfg, backend),
        scan_loop=_jax_only(cfg, backend, "scan_loop"),
        compile_cache=_compile_cache(cfg, backend),
        dist_timeout_s=_positive("dist_timeout_s", _as(float, "dist_timeout_s", _setting(cfg, "dist_timeout_s"))),
    )


def _output(cfg: Mapping) -> OutputSettings:
    return OutputSettings(
        # null (the default) → this run's own outputs/<date_time> (jobs/output_folder.py claims it)
        dir=writable_folder(
            "output_dir",
            _as(str, "output_dir", _pick(cfg, "output_dir", _timestamped())),
            "e.g. output_dir=outputs/run1",
        ),
        save_frames=_as(bool, "save_frames", _setting(cfg, "save_frames")),
        log_all_ranks=_as(bool, "log_all_ranks", _setting(cfg, "log_all_ranks")),
    )


def _check_cfg_parallel(mesh, model: ModelPreset, guidance_high: float, guidance_low: float) -> None:
    """CFG parallel puts each CFG half of every forward on one dp group; an expert with
    guidance 1.0 runs one half only, which would leave a group idle and the other doing it all."""
    for key, value, expert in (
        ("guidance_high", guidance_high, "high-noise"),
        ("guidance_low", guidance_low, "low-noise"),
    ):
        if value == 1.0 and (key == "guidance_high" or model.experts == 2):
            name = expert + " expert" if model.experts == 2 else "model"
            raise ConfigError(
                f"mesh={mesh.name} runs the two CFG halves on dp={mesh.dp} groups, but {key}=1.0 turns CFG off for "
                f"the {name} (one row per step); use a sequence-parallel mesh of the same size "
                f"(mesh=cp{mesh.world_size} or mesh.dp=1 with ulysses × ring = {mesh.world_size})",
                setting=("mesh", key),
            )


def _cache(cfg: Mapping, model: ModelPreset, image, backend: str, guidance_high: float, guidance_low: float):
    """The step-cache settings. On JAX one set of cache arrays serves both experts' programs, so
    their forwards must have the same rows: guidance 1.0 on one expert only is refused there."""
    cache = cache_settings(cfg.get("cache"), model.magcache, with_image=bool(image))
    if (
        cache.on
        and not capabilities(backend).cache_rows_per_expert
        and model.experts == 2
        and (guidance_high == 1.0) != (guidance_low == 1.0)
    ):
        raise ConfigError(
            f"cache={cache.kind} on backend=jax keeps one set of arrays for both experts, but guidance "
            f"{guidance_high:g} (high) / {guidance_low:g} (low) runs CFG on one of them only; use "
            "backend=torch, or guidance 1.0 on both experts or on neither",
            setting=("cache", "backend"),
        )
    return cache


def _auto_mesh(
    mesh_cfg: Mapping,
    model: ModelPreset,
    world_size: int,
    numbers: _Numbers,
    prompts: int,
    node_size: int | None,
    backend: str,
):
    """mesh=auto: from the world, the model's heads and the guidance."""
    from ..parallel.auto_mesh import auto_mesh

    unknown = set(mesh_cfg) - {"name"}
    if unknown:
        raise ConfigError(
            f"mesh=auto picks every degree itself but {sorted(unknown)} were set; name a mesh "
            "(e.g. mesh=usp2x2) or drop those keys",
            setting="mesh",
        )
    heads = architecture(model.architecture).transformer.num_attention_heads
    cfg_everywhere = guides_every_step(numbers.guidance_high, numbers.guidance_low, model.experts)
    mesh = auto_mesh(world_size, heads, cfg_everywhere, prompts, node_size)
    return mesh_spec(mesh.to_dict(), world_size, single_controller=capabilities(backend).single_controller)


def _jax_only(cfg: Mapping, backend: str, key: str) -> bool:
    value = _as(bool, key, _setting(cfg, key))
    if value and key not in capabilities(backend).own_settings:
        raise ConfigError(
            f"{key}=true is a JAX backend setting but backend={backend}; add backend=jax or drop {key}", setting=key
        )
    return value


def _torch_compile(cfg: Mapping, backend: str) -> bool:
    value = _as(bool, "compile", _setting(cfg, "compile"))
    if value and "compile" not in capabilities(backend).own_settings:
        raise ConfigError(
            f"compile=true asks torch.compile for the PyTorch backend, but backend={backend} compiles "
            "every step already (XLA); drop compile=true",
            setting="compile",
        )
    return value


def _compile_cache(cfg: Mapping, backend: str) -> str:
    """compile_cache: auto | off | a writable folder (absolute); JAX's own setting (XLA programs
    kept between runs); on another backend only its default."""
    value = _setting(cfg, "compile_cache")
    value = "off" if value is False else "auto" if value is None else _as(str, "compile_cache", value)
    if value in ("auto", "off"):  # (off means nothing to a backend without the cache)
        return value
    if "compile_cache" not in capabilities(backend).own_settings:
        raise ConfigError(
            f"compile_cache={value} keeps the JAX backend's compiled programs, but backend={backend}; "
            "add backend=jax or drop compile_cache (torch.compile keeps its own cache: TORCHINDUCTOR_CACHE_DIR)",
            setting="compile_cache",
        )
    return writable_folder("compile_cache", value, "or set compile_cache=auto (or off)")


def _memory(cfg: Mapping, backend: str, model: ModelPreset) -> MemorySettings:
    """memory= and swap_prefetch_steps=. jax_fsdp=true is the older spelling of memory=sharded
    on JAX (weights sharded by NamedSharding, gathered one layer at a time inside the scan): it
    is read and refused here, and the spec holds memory=sharded only (`RunSpec.shards_weights_over_mesh`)."""
    memory = _choice("memory", str(_setting(cfg, "memory")), MEMORY_MODES)
    jax_fsdp = _jax_only(cfg, backend, "jax_fsdp")
    prefetch = _as(int, "swap_prefetch_steps", _setting(cfg, "swap_prefetch_steps"))
    if prefetch < 0:
        raise ConfigError(
            f"swap_prefetch_steps={prefetch} must be ≥ 0: 0 exchanges the experts block by block during "
            "the last high-noise step, n ≥ 1 copies the low-noise expert whole from n steps before the switch",
            setting="swap_prefetch_steps",
        )
    if jax_fsdp:
        if memory == "swap":
            raise ConfigError(
                "jax_fsdp=true shards the weights but memory=swap was asked; pick one: "
                "memory=sharded (same as jax_fsdp=true) or memory=swap without jax_fsdp",
                setting=("jax_fsdp", "memory"),
            )
        memory = "sharded"
    if memory == "swap":
        if model.experts != 2:
            raise ConfigError(
                f"memory=swap swaps the high-noise expert for the low-noise one, but model={model.name} "
                "has one expert; use memory=resident or memory=sharded",
                setting="memory",
            )
        if not capabilities(backend).swap:
            raise ConfigError(
                "memory=swap is implemented for backend=torch only; on JAX use memory=sharded "
                "(weights sharded over the mesh) or memory=resident",
                setting="memory",
            )
    return MemorySettings(mode=memory, swap_prefetch_steps=prefetch)


def _timestamped() -> str:
    """The default output folder of a single run: outputs/<date_time> (local time)."""
    import time

    return time.strftime("outputs/%Y-%m-%d_%H-%M-%S")


def _cache_dir(value) -> str | None:
    """weights_cache_dir: a folder that exists or can be made, and is writable."""
    if value is None or value == "":
        return None
    return writable_folder("weights_cache_dir", _as(str, "weights_cache_dir", value), "or set weights_cache_dir=null")


def _prompts(value) -> tuple[str, ...]:
    """`prompt` is one string, or a list of strings (one video each)."""
    if value is None:
        return ("",)
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)) and value and all(isinstance(p, str) for p in value):
        return tuple(value)
    raise ConfigError(
        f'prompt={value!r} must be a string or a non-empty list of strings, e.g. prompt=\'["a cat","a dog"]\'',
        setting="prompt",
    )


def _positive(key: str, value: float) -> float:
    if value <= 0:
        raise ConfigError(f"{key}={value} must be positive", setting=key)
    return value


def _last_image(cfg: Mapping, model: ModelPreset, num_frames: int) -> str | None:
    """last_image=: a model that takes a last frame (I2V-A14B: it requires the first, _image), two
    frames at least, a readable image."""
    last = cfg.get("last_image")
    if not last:
        return None
    last = _as(str, "last_image", last)
    if architecture(model.architecture).variant.input(LAST_IMAGE) is None:
        raise ConfigError(
            f"last_image={last} was given but model={model.name} takes no last frame; first-last-frame video is "
            "I2V-A14B's (model=wan2.2_i2v_a14b); drop last_image=",
            setting=("last_image", "model"),
        )
    if num_frames < 2:
        raise ConfigError(
            f"last_image= makes the last of num_frames={num_frames} frames, which is also the first; set num_frames=5 "
            "or more",
            setting=("last_image", "num_frames"),
        )
    _check_image_readable(last, "last_image")
    return last


def _check_image_readable(path: str, setting: str = "image") -> None:
    if not os.path.isfile(path):
        raise ConfigError(f"{setting}={path} does not exist; give the path of a PNG or JPEG file", setting=setting)
    try:
        from PIL import Image

        with Image.open(path) as im:
            im.verify()
    except Exception as exc:  # PIL raises many types for bad files
        raise ConfigError(
            f"{setting}={path} could not be read as an image ({type(exc).__name__}: {exc}); give a PNG or JPEG",
            setting=setting,
        ) from None
