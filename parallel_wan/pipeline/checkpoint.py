"""The checkpoint side of a run: cheap compatibility checks before anything loads, the
built-in tiny model, and loading every component concurrently onto the backend."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..config import TASK_IN_CHANNELS, ConfigError, RunSpec, mesh_spec
from ..models import transformer as dit

HIGH, LOW, SINGLE = "high_noise", "low_noise", "single"


def preflight(spec: RunSpec):
    """Cheap checks of the checkpoint against the run (json and safetensors headers only).
    Returns the checkpoint description, or None for the built-in tiny model."""
    if spec.attention_impl == "xfuser":
        from ..backends.torch.xfuser_attention import xfuser_unavailable_reason

        if xfuser_unavailable_reason():
            raise ConfigError(xfuser_unavailable_reason())
    if spec.checkpoint_dir is None:
        from ..tiny import transformer_config

        check_heads(spec, transformer_config(spec.model.task))
        return None
    from ..weights.layout import CheckpointError, describe_checkpoint

    try:
        ckpt = describe_checkpoint(spec.checkpoint_dir)
    except CheckpointError as exc:
        raise ConfigError(str(exc)) from None
    check_compatible(spec, ckpt)
    return ckpt


def check_compatible(spec: RunSpec, ckpt) -> None:
    experts = sorted(ckpt.experts)
    want = [HIGH, LOW] if spec.model.experts == 2 else [SINGLE]
    if experts != sorted(want):
        raise ConfigError(
            f"checkpoint_dir={ckpt.root} holds experts {experts} but model={spec.model.name} needs {want}; "
            "pick the model preset that matches the checkpoint"
        )
    for name, tcfg in ckpt.transformers.items():
        need = TASK_IN_CHANNELS[spec.model.task]
        if tcfg.in_channels != need:
            raise ConfigError(
                f"checkpoint_dir={ckpt.root}: the {name} transformer takes {tcfg.in_channels} input channels but "
                f"model={spec.model.name} ({spec.model.task}) needs {need}; pick the matching model preset"
            )
    check_heads(spec, ckpt.transformers[experts[0]])
    stride = ckpt.vae_config.scale_factor_spatial * ckpt.transformers[experts[0]].patch_size[1]
    if spec.height % stride or spec.width % stride:
        raise ConfigError(
            f"height={spec.height} width={spec.width} must be multiples of {stride} for this checkpoint's VAE and patch size"
        )


def check_heads(spec: RunSpec, tcfg) -> None:
    """Ulysses splits attention heads: they must divide by the ulysses degree."""
    m = spec.mesh
    mesh_spec({"name": m.name, "dp": m.dp, "cp": m.cp, "ulysses": m.ulysses, "ring": m.ring}, m.world_size,
              heads=tcfg.num_attention_heads)


def materialize_tiny(spec: RunSpec, folder: str):
    from ..tiny import build_tiny, write_checkpoint
    from ..weights.layout import describe_checkpoint

    write_checkpoint(build_tiny(kind=spec.model.task, seed=0), folder, layout="diffusers")
    return describe_checkpoint(folder)


@dataclass
class Loaded:
    ckpt: object
    experts: dict  # name → (TransformerConfig, params)
    vae_config: object
    vae_params: object
    text_encoder: object


def load_components(spec: RunSpec, ckpt, backend) -> Loaded:
    """Text encoder, VAE and the experts load concurrently; each expert lands on the device in
    the run's dtype with the reference's float32 exceptions. Only the main rank loads the text
    encoder (a PyTorch module on `backend.text_device`): it encodes once and broadcasts the
    embeddings."""
    from ..text.umt5 import TextEncoder
    from ..weights.loader import load_transformer, load_vae

    def expert(name):
        params = load_transformer(ckpt, name, spec.dtype, dit.keeps_fp32)
        return name, (ckpt.transformers[name], backend.place(params, spec.dtype, dit.keeps_fp32))

    def vae_part():
        cfg, params = load_vae(ckpt, "float32")
        return cfg, backend.place(params, "float32")

    with ThreadPoolExecutor(max_workers=4) as pool:
        text_future = pool.submit(TextEncoder.load, ckpt, spec.dtype, backend.text_device) if backend.is_main else None
        vae_future = pool.submit(vae_part)
        expert_futures = [pool.submit(expert, name) for name in ckpt.experts]
        experts = dict(f.result() for f in expert_futures)
        vae_cfg, vae_params = vae_future.result()
        text_encoder = text_future.result() if text_future is not None else None
    return Loaded(ckpt, experts, vae_cfg, vae_params, text_encoder)
