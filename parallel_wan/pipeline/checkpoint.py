"""The checkpoint side of a run: cheap compatibility checks before anything loads, the
built-in tiny model, and loading every component concurrently onto the backend."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..backends.capabilities import capabilities
from ..config import ConfigError, RunSpec, mesh_spec
from ..models import transformer as dit
from ..models.experts import EXPERT_OF_ROLE, LOW, ROLE
from ..models.latent import size_multiple
from ..models.registry import architecture
from .steps import check_step_plan
from .text_sources import TextSource

log = logging.getLogger("parallel_wan")


def preflight(spec: RunSpec):
    """Cheap checks of the checkpoint against the run (json and safetensors headers only).
    Returns the checkpoint description, or None for the built-in tiny model."""
    if spec.weights.checkpoint_dir is None:
        tcfg = architecture(spec.model.architecture).transformer  # plain data: the HTTP process runs this
        check_heads(spec, tcfg)
        expert_loras(spec, {name: tcfg for name in spec.model.variant.experts})  # checked now
        check_step_plan(spec, None)
        return None
    from ..weights.layout import CheckpointError, describe_checkpoint

    try:
        ckpt = describe_checkpoint(spec.weights.checkpoint_dir)
    except CheckpointError as exc:
        raise ConfigError(str(exc)) from None
    ckpt = with_expert_files(spec, ckpt)
    check_fp8_compute(spec, ckpt)
    check_compatible(spec, ckpt)
    expert_loras(spec, ckpt.transformers)  # every LoRA file checked against the model, headers only
    return ckpt


def with_expert_files(spec: RunSpec, ckpt):
    """The checkpoint with the experts given as one file each (`weights_high=` …) described
    from their headers and scales (weights/expert_file.py), logged on the main process;
    ConfigError naming the setting and file when one would not load exactly."""
    files = spec.weights.expert_files()
    if not files:
        return ckpt
    import dataclasses

    from ..config.expert_files import ROLES
    from ..weights.expert_file import describe_expert_file

    described = {}
    for setting, path in files.items():
        expert = EXPERT_OF_ROLE[ROLES[setting]]
        if expert not in ckpt.transformers:
            raise ConfigError(
                f"{setting}={path}: checkpoint_dir={ckpt.root} has no {expert} expert "
                f"({', '.join(ckpt.transformers)}); use the setting of one of those"
            )
        try:
            described[expert] = describe_expert_file(setting, path, ckpt.transformers[expert])
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return dataclasses.replace(ckpt, expert_files=described)


def check_fp8_compute(spec: RunSpec, ckpt) -> None:
    """quant_compute=fp8 multiplies float8 block linears only (backends/torch/fp8_gemm.py); an
    expert holds them when its file stores fp8, or when it loads wide (from checkpoint_dir, which
    loads in the run's dtype, or a bf16 file) under quantize=fp8 — a file's int8 weights stay
    int8 and are widened. Refused in one line when no expert would: the log and the sidecar
    would say FP8 while every layer widens (config/quantization.py refuses the case without
    expert files before this)."""
    nvfp4 = [f for f in ckpt.expert_files.values() if f.nvfp4_linears]
    if nvfp4 and not capabilities(spec.execution.backend).nvfp4_weights:
        raise ConfigError(
            f"{nvfp4[0].setting}={nvfp4[0].path} stores NVFP4 weights, which backend={spec.execution.backend} "
            "does not read (its layer scan widens int8/float8 weights); use backend=torch, or an fp8/int8/bf16 file"
        )
    if spec.quantization.compute == "fp4":
        if spec.quantization.quantize == "nvfp4" or any(f.nvfp4_linears for f in ckpt.expert_files.values()):
            return
        files = "; ".join(
            f"{f.setting}={f.path} stores {f.stored_dtype} ({f.format})" for f in ckpt.expert_files.values()
        )
        raise ConfigError(
            f"quant_compute=fp4 multiplies NVFP4 weights, but no expert of this run holds any ({files}); "
            "give NVFP4 expert files or add quantize=nvfp4, or set quant_compute=fp8 or dequant"
        )
    if spec.quantization.compute != "fp8":
        return
    # NVFP4 weights do not count: quant_compute=fp8 widens them (quant_compute=fp4 multiplies them)
    quantize_fp8 = spec.quantization.quantize == "fp8"
    why, wide = [], False
    for expert in ckpt.experts:
        file = ckpt.expert_files.get(expert)
        if file is not None and file.fp8_linears:
            return
        if file is None or file.wide_linears:
            if quantize_fp8:
                return
            wide = True
        why.append(
            f"the {expert} expert loads wide from checkpoint_dir"
            if file is None
            else f"{file.setting}={file.path} stores {file.stored_dtype} ({file.format})"
            + (", which quantize=fp8 keeps as stored" if quantize_fp8 else "")
        )
    fix = "add quantize=fp8 (it quantizes the wide ones), or " if wide else ""
    raise ConfigError(
        f"quant_compute=fp8 multiplies float8 weights, but no expert of this run holds any under "
        f"quantize={spec.quantization.quantize} ({'; '.join(why)}); {fix}set quant_compute=dequant "
        "(or auto), or give fp8 expert files (NVFP4 weights multiply in FP4 under quant_compute=fp4)"
    )


def architecture_record(spec: RunSpec, ckpt) -> dict:
    """The sidecar's record of the architecture that ran: the registry's name for the
    checkpoint's configs (None: one it does not list), the preset's, whether they agree, and the
    dimensions read from the checkpoint — which win over the preset's (docs/architecture.md)."""
    from ..models.known_architecture import dimensions, identify

    tcfg = next(iter(ckpt.transformers.values()))  # the experts of a pair share every dimension
    name = identify(tcfg, ckpt.vae_config)
    preset = spec.model.architecture
    dims = dimensions(tcfg, ckpt.vae_config)
    return {
        "name": name,
        "preset": preset,
        "matches_preset": name == preset,
        **{k: dims[k] for k in ("dim", "num_layers", "num_attention_heads", "ffn_dim", "in_channels", "vae_z_dim")},
    }


def log_architecture(spec: RunSpec, ckpt) -> None:
    """One line on the main rank: the architecture used, and a WARNING when the preset names
    another (the checkpoint's configs are used; the preset gives only the run's defaults)."""
    from ..models.known_architecture import described, identify

    tcfg = next(iter(ckpt.transformers.values()))
    name = identify(tcfg, ckpt.vae_config)
    what = f"{'the ' + name if name else 'an unlisted'} architecture ({described(tcfg, ckpt.vae_config)})"
    preset = architecture(spec.model.architecture)
    if name == preset.name:
        log.info("architecture: %s, from %s", what, ckpt.root)
        return
    log.warning(
        "model=%s is a preset for %s (%s), but checkpoint_dir=%s holds %s: the checkpoint's configs are used; "
        "the preset gives only the run's defaults (steps, size, frames, guidance, shift, boundary)",
        spec.model.name,
        preset.name,
        described(preset.transformer, preset.vae),
        ckpt.root,
        what,
    )


def log_expert_files(ckpt) -> None:
    for expert, file in ckpt.expert_files.items():
        log.info(
            "%s expert from %s=%s: format %s, stored %s (%d quantized tensors)",
            expert,
            file.setting,
            file.path,
            file.format,
            file.stored_dtype,
            len(file.quantized),
        )


def expert_loras(spec: RunSpec, transformers: dict) -> dict:
    """expert → its `lora.merge.ExpertLora` (None without LoRA), checked against the expert's
    parameter shapes; raises ConfigError naming the file and key."""
    if not spec.weights.loras:
        return {name: None for name in transformers}
    from ..lora.merge import expert_lora
    from ..lora.settings import expert_sources
    from ..models.transformer_shapes import param_shapes

    return {
        name: expert_lora(name, expert_sources(spec.weights.loras, ROLE[name]), param_shapes(tcfg))
        for name, tcfg in transformers.items()
    }


def check_compatible(spec: RunSpec, ckpt) -> None:
    experts = sorted(ckpt.experts)
    want = list(spec.model.variant.experts)
    if experts != sorted(want):
        raise ConfigError(
            f"checkpoint_dir={ckpt.root} holds experts {experts} but model={spec.model.name} needs {want}; "
            "pick the model preset that matches the checkpoint"
        )
    for name, tcfg in ckpt.transformers.items():
        need = architecture(spec.model.architecture).transformer.in_channels
        if tcfg.in_channels != need:
            raise ConfigError(
                f"checkpoint_dir={ckpt.root}: the {name} transformer takes {tcfg.in_channels} input channels but "
                f"model={spec.model.name} ({spec.model.task}) needs {need}; pick the matching model preset"
            )
    check_heads(spec, ckpt.transformers[experts[0]])
    stride = size_multiple(ckpt.transformers[experts[0]], ckpt.vae_config)
    if spec.video.height % stride or spec.video.width % stride:
        raise ConfigError(
            f"height={spec.video.height} width={spec.video.width} must be multiples of {stride} for this checkpoint's "
            "VAE and patch size",
            setting=("height", "width"),
        )
    check_step_plan(spec, ckpt)  # every entry of a job: its steps decide whether a cache curve fits


def check_heads(spec: RunSpec, tcfg) -> None:
    """Ulysses splits attention heads: they must divide by the ulysses degree."""
    mesh_spec(spec.mesh.to_dict(), spec.mesh.world_size, heads=tcfg.num_attention_heads)


def load(spec: RunSpec, backend, ckpt=None, tiny_dir: str | None = None, keep=None):
    """The one load of a run — a single generation's and a job's alike: the checkpoint (the
    built-in tiny model: the one stored on this machine, builtin/stored.py, or written to
    `tiny_dir` first), every component onto `backend`, one log line. Returns (Loaded, the
    checkpoint description). `keep`: components loaded before, whose text side and VAE stay —
    only the experts load again (another LoRA, memory=swap's next video)."""
    import time

    t0 = time.perf_counter()
    if ckpt is None:
        ckpt = builtin_checkpoint(spec, tiny_dir) if spec.weights.checkpoint_dir is None else preflight(spec)
    loaded = load_components(spec, ckpt, backend, keep)
    backend.synchronize()
    log.info(
        "loaded %s (%s) in %.1f s", loaded_what(spec, ckpt), ", ".join(sorted(loaded.experts)), time.perf_counter() - t0
    )
    return loaded, ckpt


def loaded_what(spec: RunSpec, ckpt) -> str:
    """What the load log line names: the built-in model (written to a temporary folder in the
    diffusers layout, which is not the user's checkpoint), or the checkpoint's folder and layout."""
    if spec.weights.checkpoint_dir is None:
        return f"the built-in {spec.model.name} model (random weights)"
    return f"the {ckpt.layout}-layout checkpoint {spec.weights.checkpoint_dir}"


def builtin_checkpoint(spec: RunSpec, fallback: str):
    from ..builtin.stored import tiny_checkpoint_folder
    from ..weights.layout import describe_checkpoint

    return describe_checkpoint(tiny_checkpoint_folder(spec.model.architecture, fallback))


def expert_placement(spec: RunSpec, ckpt, name: str, shard) -> dict:
    """`backend.place` arguments for an expert under spec.memory.mode (README "Memory"): swap keeps
    the low-noise expert in host memory until the plan moves it; sharded hands the backend this
    rank's chunks and each tensor's whole dim 0 (from the headers)."""
    if spec.memory.mode == "swap" and name == LOW:
        return {"where": "host"}
    if shard is not None:
        from ..weights.loader import expert_sources

        rows = {n: (info.shape[0] if info.shape else 0) for n, info in expert_sources(ckpt, name).items()}
        if spec.quantization.quantize != "none":  # each quantized weight's scale has its rows
            from ..weights.quantized.names import global_scale_name, quantizable, scale_name

            rows.update({scale_name(n): r for n, r in rows.items() if quantizable(n)})
            if spec.quantization.quantize == "nvfp4":  # and NVFP4's global scale
                rows.update({global_scale_name(n): r for n, r in rows.items() if quantizable(n)})
        return {"where": "sharded", "full_rows": rows}
    # compile=true (torch): the backend may lay a transformer out for its compiled hot path
    return {"transformer": True} if spec.execution.compile else {}


@dataclass
class Loaded:
    ckpt: object
    experts: dict  # name → (TransformerConfig, params)
    vae_config: object
    vae_params: object
    text_encoder: object
    loras: dict | None = None  # expert → lora.merge.ExpertLora merged into it (None: none)
    texts: TextSource | None = None  # where generate takes the texts' rows (text_sources.py); None: encode them
    image_encoder: object | None = None  # Animate: image/clip.ClipImageEncoder on the text-encoding process
    audio_encoder: object | None = None  # S2V: audio/wav2vec.Wav2VecEncoder on the text-encoding process


def load_components(spec: RunSpec, ckpt, backend, keep=None) -> Loaded:
    """The experts load side by side while the text encoder and the VAE load on a background
    thread; each expert lands on the device in the run's dtype with the reference's float32
    exceptions. Only the main rank loads the text encoder (a PyTorch module on
    `backend.text_device`): it encodes once and broadcasts the embeddings.

    These threads only orchestrate: the tensor copies of every component run on the one shared
    pool of `weights.copy_pool` (about one worker per core), so loading concurrently does not
    oversubscribe the cores. The scheduler needs no loading: its config came with `ckpt`. With
    `keep` (a Loaded), only the experts load; its text encoder, texts source and VAE stay."""
    from ..text.umt5 import TextEncoder
    from ..weights.loader import load_transformer, load_vae

    shard = backend.weight_shard(spec.memory.mode)  # memory=sharded on torch: (rank, world), each rank reads its rows
    cache_dir = spec.weights.cache_dir
    if cache_dir is not None and spec.weights.checkpoint_dir is None:
        # The built-in tiny model is written afresh for every run: nothing a cache could reuse.
        log.info("weights_cache_dir=%s ignored: the built-in tiny model has no checkpoint to cache", cache_dir)
        cache_dir = None

    loras = expert_loras(spec, ckpt.transformers)
    if backend.leader:
        log_architecture(spec, ckpt)
        log_expert_files(ckpt)

    def expert(name):
        lora = loras[name]
        placement = expert_placement(spec, ckpt, name, shard)
        # an expert placed whole on a GPU takes its LoRA merged there (lora/merge.py); the
        # weights cache must hold merged weights, and quantize= merges before it quantizes
        on_device = (
            lora is not None
            and cache_dir is None
            and spec.quantization.quantize == "none"
            and placement.get("where", "device") == "device"
            and backend.merges_lora_on_device
        )
        params = load_transformer(
            ckpt,
            name,
            spec.execution.dtype,
            dit.keeps_fp32,
            shard,
            lora,
            cache_dir=cache_dir,
            quantize=spec.quantization.quantize,
            lora_on_device=on_device,
        )
        if on_device:
            placement["lora"] = lora
        placed = backend.place(params, spec.execution.dtype, dit.keeps_fp32, **placement)
        if lora is not None:
            log.info(
                "%s expert: merged %d LoRA file(s)%s, %d tensors changed, %.1f MB of LoRA read",
                name,
                len(lora.files),
                " on the device" if on_device else "",
                len(lora.targets),
                lora.bytes_read / 1e6,
            )
        return name, (ckpt.transformers[name], placed)

    def text_and_vae():
        if keep is not None:
            return keep.text_encoder, keep.vae_config, keep.vae_params, keep.image_encoder, keep.audio_encoder
        text_encoder = (
            TextEncoder.load(ckpt, spec.execution.dtype, backend.text_device) if backend.encodes_text else None
        )
        image_encoder = None
        if ckpt.image_encoder_path is not None and backend.encodes_text:
            from ..image.clip import ClipImageEncoder
            from ..weights.safetensors_io import torch_dtype

            image_encoder = ClipImageEncoder(
                ckpt.image_encoder_path,
                ckpt.image_processor_path,
                torch_dtype(spec.execution.dtype),
                backend.text_device,
            )
        audio_encoder = None
        if ckpt.audio_encoder_path is not None and backend.encodes_text:
            from ..audio.wav2vec import Wav2VecEncoder
            from ..weights.safetensors_io import torch_dtype

            audio_encoder = Wav2VecEncoder(
                ckpt.audio_encoder_path, torch_dtype(spec.execution.dtype), backend.text_device
            )
        vae_cfg, vae_params = load_vae(ckpt, "float32")
        return text_encoder, vae_cfg, backend.place(vae_params, "float32"), image_encoder, audio_encoder

    # the experts and the VAE load side by side, unless placing is a collective (JAX across hosts)
    workers = 1 + len(ckpt.experts) if backend.places_concurrently else 1
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="load") as pool:
        background = pool.submit(text_and_vae)
        experts = dict(pool.map(expert, ckpt.experts))
        text_encoder, vae_cfg, vae_params, image_encoder, audio_encoder = background.result()
    texts = keep.texts if keep is not None else None
    return Loaded(ckpt, experts, vae_cfg, vae_params, text_encoder, loras, texts, image_encoder, audio_encoder)
