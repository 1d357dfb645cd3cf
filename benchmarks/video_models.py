"""A whole model of an architecture with random weights made on the device, as both pipelines
take it: diffusers' and transformers' modules (what `WanPipeline` runs) and our `Loaded` on the
same storage (what `generate(components=…)` runs), so neither side copies the other's weights.

No checkpoint is read or written: T2V-A14B's 57 GB of experts cannot be written on a lent GPU's
64 GB disk, and random weights cost the same FLOPs. The `Checkpoint` our pipeline asks (the
configs, the scheduler's, the boundary) is made from the architecture's own configs
(models/registry.py); its paths name a folder holding nothing, which nothing reads when the
components are given. Every tensor is drawn on the device by the built-in tiny model's rule
(builtin/tiny.py: norm scales near 1, small biases, 1/√fan_in weights), so activations stay at
unit scale through every layer and a swapped name would show.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import torch

from parallel_wan.builtin.scheduler import TINY_SCHEDULER_CONFIG
from parallel_wan.builtin.tiny import build_tokenizer
from parallel_wan.models import transformer as dit
from parallel_wan.models.experts import DIFFUSERS_FOLDERS
from parallel_wan.models.registry import architecture
from parallel_wan.pipeline.checkpoint import Loaded
from parallel_wan.text.tokenizer import TransformersTokenizer
from parallel_wan.text.umt5 import TextEncoder
from parallel_wan.text.umt5_encoder import EncoderShape, UMT5Encoder
from parallel_wan.weights import tree
from parallel_wan.weights.layout import Checkpoint


@dataclasses.dataclass
class RandomModel:
    """The modules (diffusers' experts and VAE, transformers' UMT5 encoder, the tokenizer) and the
    checkpoint description our pipeline reads."""

    arch: object  # models/registry.Architecture
    experts: dict  # expert name → diffusers WanTransformer3DModel
    vae: object  # diffusers AutoencoderKLWan (float32)
    text_encoder: object  # transformers UMT5EncoderModel
    tokenizer: object  # transformers' fast tokenizer (builtin/tiny.py's vocabulary)
    ckpt: Checkpoint

    def bytes(self) -> dict:
        """Bytes on the device per component (the experts together)."""

        def size(module):
            return sum(p.numel() * p.element_size() for p in module.parameters())

        return {
            "experts": sum(size(m) for m in self.experts.values()),
            "text_encoder": size(self.text_encoder),
            "vae": size(self.vae),
        }


def randomize(module: torch.nn.Module, seed: int) -> None:
    """builtin/tiny.py's rule, drawn in place on the module's device (no host copy of 14B
    values) from one generator per module."""
    first = next(module.parameters())
    gen = torch.Generator(first.device).manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            owner, _, leaf = name.rpartition(".")
            p.normal_(generator=gen)
            if leaf == "bias":
                p.mul_(0.02)
            elif leaf == "gamma" or "norm" in owner.rpartition(".")[2]:
                p.mul_(0.1).add_(1.0)
            elif leaf == "scale_shift_table":
                p.mul_(p.shape[-1] ** -0.5)
            else:
                fan_in = p.numel() // p.shape[0] if p.ndim > 1 else p.numel()
                p.mul_(fan_in**-0.5)


def _materialise(module, device, dtype, keep_fp32=lambda name: False):
    """A module built on meta, cast (float32 where `keep_fp32(name)`) and given storage on `device`."""
    module = module.to(dtype)
    for name, p in module.named_parameters():
        if keep_fp32(name):
            p.data = p.data.float()
    return module.to_empty(device=device).eval().requires_grad_(False)


def build(arch_name: str, device: torch.device, dtype: torch.dtype, seed: int = 0, empty_dir: str = ".") -> RandomModel:
    """Every component of `arch_name` (a T2V architecture) with random weights on `device`: the
    experts in `dtype` with the reference's float32 exceptions, the UMT5 encoder in `dtype`, the
    VAE in float32 (our pipeline and diffusers' both decode in float32)."""
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed
    from diffusers.utils import logging as diffusers_logging
    from transformers import UMT5Config, UMT5EncoderModel

    diffusers_logging.set_verbosity_error()  # `.to(dtype)` warns about its fp32 modules, put back below
    arch = architecture(arch_name)
    tcfg = arch.transformer
    tokenizer = build_tokenizer()
    text_fields = {"vocab_size": 8 * math.ceil(len(tokenizer) / 8), **arch.text_encoder}
    with torch.device("meta"):
        experts = {name: WanTransformer3DModel(**tcfg.to_diffusers()) for name in arch.variant.experts}
        vae = AutoencoderKLWan(**arch.vae.to_diffusers())
        text_encoder = UMT5EncoderModel(
            UMT5Config(dropout_rate=0.0, layer_norm_epsilon=1e-6, pad_token_id=0, eos_token_id=1, **text_fields)
        )
    for i, name in enumerate(experts):
        experts[name] = _materialise(experts[name], device, dtype, dit.keeps_fp32)
        # RoPE tables are computed buffers, not weights: rebuilt (meta left them empty)
        experts[name].rope = WanRotaryPosEmbed(tcfg.attention_head_dim, tcfg.patch_size, tcfg.rope_max_seq_len).to(
            device
        )
        randomize(experts[name], seed * 16 + i)
    vae = _materialise(vae, device, torch.float32)
    randomize(vae, seed * 16 + 8)
    text_encoder = _materialise(text_encoder, device, dtype)
    # to_empty gives the tied input embedding two storages (2 GB more for the XXL vocabulary): one again
    text_encoder.encoder.embed_tokens = text_encoder.shared
    randomize(text_encoder, seed * 16 + 9)
    return RandomModel(arch, experts, vae, text_encoder, tokenizer, checkpoint(arch, empty_dir))


def checkpoint(arch, root: str) -> Checkpoint:
    """What our pipeline reads of a checkpoint, from the architecture: its configs, diffusers'
    UniPC scheduler config (as the Wan 2.2 diffusers checkpoints carry it) and the boundary.
    The paths name `root`, which nothing reads when the components are given."""
    from diffusers import UniPCMultistepScheduler

    root = Path(root)
    scheduler = UniPCMultistepScheduler(**TINY_SCHEDULER_CONFIG, flow_shift=arch.shift)
    return Checkpoint(
        root=root,
        layout="diffusers",
        experts={name: root / DIFFUSERS_FOLDERS[name] for name in arch.variant.experts},
        transformers=dict.fromkeys(arch.variant.experts, arch.transformer),
        vae_path=root / "vae",
        vae_kind="wan2.2" if arch.vae.z_dim == 48 else "wan2.1",
        vae_config=arch.vae,
        text_encoder_path=root / "text_encoder",
        text_encoder_format="diffusers",
        tokenizer_path=root / "tokenizer",
        scheduler_config={k: v for k, v in dict(scheduler.config).items() if not k.startswith("_")},
        pipeline={"boundary_ratio": arch.boundary},
    )


class SharedTextEncoder(TextEncoder):
    """Our text encoder on transformers' module's storage. `release()` drops our reference as
    the product's does; the storage stays alive for diffusers' pipeline, which keeps its
    encoder (the peaks after the text phase include it: `RandomModel.bytes()`)."""


def text_encoder(model: RandomModel) -> SharedTextEncoder:
    state = dict(model.text_encoder.state_dict())
    state.setdefault("encoder.embed_tokens.weight", state["shared.weight"])
    state.setdefault("shared.weight", state["encoder.embed_tokens.weight"])
    shape = EncoderShape.from_config(model.text_encoder.config.to_dict())
    with torch.device("meta"):
        ours = UMT5Encoder(shape)
    missing, unexpected = ours.load_state_dict(state, strict=False, assign=True)
    if missing or unexpected:
        raise ValueError(f"UMT5 names differ: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return SharedTextEncoder(ours.eval().requires_grad_(False), TransformersTokenizer(model.tokenizer))


def quantized(params: dict, kind: str) -> dict:
    """An expert's tree under `quantize=kind`, as the loader makes it (weights/quantized/): each
    block linear's weight in one byte and its float32 scale per output channel; every other
    tensor the same storage."""
    from parallel_wan.weights.quantized.form import layer_names, quantize_layer
    from parallel_wan.weights.quantized.names import quantizable

    flat = {}
    for name, t in tree.flatten(params).items():
        if quantizable(name) and t.ndim == 2:
            flat.update(zip(layer_names(name, kind), quantize_layer(t, kind), strict=True))
        else:
            flat[name] = t
    return tree.unflatten(flat)


def loaded(model: RandomModel, backend, dtype: str, quantize: str = "none") -> Loaded:
    """Our components on the modules' storage, placed as the product places them (a no-op copy:
    the tensors are on the device in their dtypes already), `quantize` applied to the experts."""
    experts = {}
    for name, module in model.experts.items():
        params = tree.unflatten(module.state_dict())
        if quantize != "none":
            params = quantized(params, quantize)
        experts[name] = (model.arch.transformer, backend.place(params, dtype, dit.keeps_fp32))
    vae_params = backend.place(tree.unflatten(model.vae.state_dict()), "float32")
    return Loaded(model.ckpt, experts, model.arch.vae, vae_params, text_encoder(model))
