"""The parameters of a Wan video VAE, by diffusers name (AutoencoderKLWan), and their shapes:
pure arithmetic on the config, as transformer_shapes.py is for the DiT. The memory planner
and the TPU ahead-of-time compiles take the VAE's abstract weights from here instead of
building diffusers' module on the meta device — importing diffusers' autoencoders pulls in its
UNets, peft and torch._dynamo: about 4 CPU seconds in every `python -m parallel_wan.doctor` or
`.plan` process. tests/unit/test_vae_shapes.py holds it equal to AutoencoderKLWan's
named_parameters for every VAE of the registry and for unusual configs.

Both VAEs: an encoder (conv_in, down blocks, a middle block of resnet-attention-resnet, an RMS
norm and conv_out to 2·z channels), quant_conv and post_quant_conv (1×1×1), and a decoder that
mirrors the encoder with one more resnet per level. Wan 2.1 (`is_residual=False`) lists the
encoder's resnets and resamples flat in `down_blocks`, and halves the channels at each spatial
upsample; Wan 2.2 groups each level as `resnets` + a `downsampler`/`upsampler` that keeps them.
"""

from __future__ import annotations

from .vae_config import VaeConfig

Shapes = dict[str, tuple[int, ...]]


def param_shapes(cfg: VaeConfig) -> Shapes:
    """Every parameter of AutoencoderKLWan with this config (diffusers names), and its shape."""
    z = cfg.z_dim
    shapes: Shapes = {}
    shapes.update(_encoder(cfg))
    shapes.update(_conv("quant_conv", 2 * z, 2 * z, (1, 1, 1)))
    shapes.update(_conv("post_quant_conv", z, z, (1, 1, 1)))
    shapes.update(_decoder(cfg))
    return shapes


def _conv(name: str, out_dim: int, in_dim: int, kernel: tuple[int, ...]) -> Shapes:
    return {f"{name}.weight": (out_dim, in_dim, *kernel), f"{name}.bias": (out_dim,)}


def _resnet(name: str, in_dim: int, out_dim: int) -> Shapes:
    shapes = {f"{name}.norm1.gamma": (in_dim, 1, 1, 1)}
    shapes.update(_conv(f"{name}.conv1", out_dim, in_dim, (3, 3, 3)))
    shapes[f"{name}.norm2.gamma"] = (out_dim, 1, 1, 1)
    shapes.update(_conv(f"{name}.conv2", out_dim, out_dim, (3, 3, 3)))
    if in_dim != out_dim:
        shapes.update(_conv(f"{name}.conv_shortcut", out_dim, in_dim, (1, 1, 1)))
    return shapes


def _mid_block(name: str, dim: int) -> Shapes:
    shapes = _resnet(f"{name}.resnets.0", dim, dim)
    shapes[f"{name}.attentions.0.norm.gamma"] = (dim, 1, 1)
    shapes.update(_conv(f"{name}.attentions.0.to_qkv", 3 * dim, dim, (1, 1)))
    shapes.update(_conv(f"{name}.attentions.0.proj", dim, dim, (1, 1)))
    shapes.update(_resnet(f"{name}.resnets.1", dim, dim))
    return shapes


def _resample(name: str, dim: int, out_dim: int, temporal: bool, up: bool) -> Shapes:
    """A spatial resample (a 3×3 conv, `resample.1`, after the zero pad or the nearest upsample),
    with a causal time conv when it also resamples time: 3×1×1, dim → dim going down, dim → 2·dim
    (two frames folded into channels) going up."""
    shapes = _conv(f"{name}.resample.1", out_dim, dim, (3, 3))
    if temporal:
        shapes.update(_conv(f"{name}.time_conv", 2 * dim if up else dim, dim, (3, 1, 1)))
    return shapes


def _head(name: str, dim: int, out_dim: int) -> Shapes:
    shapes = {f"{name}.norm_out.gamma": (dim, 1, 1, 1)}
    shapes.update(_conv(f"{name}.conv_out", out_dim, dim, (3, 3, 3)))
    return shapes


def _encoder(cfg: VaeConfig) -> Shapes:
    dims = [cfg.base_dim * m for m in (1, *cfg.dim_mult)]
    levels = len(cfg.dim_mult)
    shapes = _conv("encoder.conv_in", dims[0], cfg.in_channels, (3, 3, 3))
    flat = 0  # Wan 2.1: the index in the flat down_blocks list
    for i, (in_dim, out_dim) in enumerate(zip(dims[:-1], dims[1:])):
        down = i != levels - 1
        temporal = down and bool(cfg.temperal_downsample[i])
        if cfg.is_residual:
            name = f"encoder.down_blocks.{i}"
            for j in range(cfg.num_res_blocks):
                shapes.update(_resnet(f"{name}.resnets.{j}", in_dim if j == 0 else out_dim, out_dim))
            if down:
                shapes.update(_resample(f"{name}.downsampler", out_dim, out_dim, temporal, up=False))
            continue
        for j in range(cfg.num_res_blocks):
            shapes.update(_resnet(f"encoder.down_blocks.{flat}", in_dim if j == 0 else out_dim, out_dim))
            flat += 1
        if down:
            shapes.update(_resample(f"encoder.down_blocks.{flat}", out_dim, out_dim, temporal, up=False))
            flat += 1
    shapes.update(_mid_block("encoder.mid_block", dims[-1]))
    shapes.update(_head("encoder", dims[-1], 2 * cfg.z_dim))
    return shapes


def _decoder(cfg: VaeConfig) -> Shapes:
    dims = [cfg.decoder_dim * m for m in (cfg.dim_mult[-1], *cfg.dim_mult[::-1])]
    levels = len(cfg.dim_mult)
    shapes = _conv("decoder.conv_in", dims[0], cfg.z_dim, (3, 3, 3))
    shapes.update(_mid_block("decoder.mid_block", dims[0]))
    for i, (in_dim, out_dim) in enumerate(zip(dims[:-1], dims[1:])):
        up = i != levels - 1
        temporal = up and bool(cfg.temperal_upsample[i])
        if i > 0 and not cfg.is_residual:
            in_dim //= 2  # Wan 2.1's spatial upsample halved the channels of the level before
        name = f"decoder.up_blocks.{i}"
        for j in range(cfg.num_res_blocks + 1):
            shapes.update(_resnet(f"{name}.resnets.{j}", in_dim if j == 0 else out_dim, out_dim))
        if up and cfg.is_residual:
            shapes.update(_resample(f"{name}.upsampler", out_dim, out_dim, temporal, up=True))
        elif up:
            shapes.update(_resample(f"{name}.upsamplers.0", out_dim, out_dim // 2, temporal, up=True))
    shapes.update(_head("decoder", dims[-1], cfg.out_channels))
    return shapes
