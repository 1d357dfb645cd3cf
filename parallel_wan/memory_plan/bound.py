"""An upper bound of the planner's peak per device, by arithmetic alone: no torch, no meta
tensors, microseconds. The fit check (fits.py) compares it first, so a run that fits with room
to spare — nearly every run — never pays the planner (0.5–3 s with its imports), and only a run
near or over the device's memory does.

What is exact here is the planner's own arithmetic: the weights per memory mode
(weight_bytes.py), the text encoder (text_encoder_bytes.py), the VAE's weights, the latents, a
step cache's arrays (cache_bytes), the rank's shapes (rank_shapes). What the planner gets by
running the model on meta tensors is bounded by counting, generously, every tensor that could be
alive at once:

- the denoise loop: per forward row and local token, the block's activations (its input, fp32
  norm and modulation temporaries, q/k/v and the attention output, the sequence-parallel
  exchange buffers: 16 bytes + 12 elements per channel), the FFN's hidden layer twice (its
  projection and GELU), sparse=svg's gathered copies (6 elements per channel) and its profile,
  a per-token timestep's modulation tables (TI2V: 18 fp32 copies of the
  channels); per row the text keys/values (6 elements per channel of the 512 text tokens); the
  sampler's state and the predictor's fp32 inputs and outputs (12 fp32 copies of the tokens);
- what is held through the loop: the encoded text before and after the text embedder (twice),
  the RoPE tables (twice), the condition tokens and the noise;
- the VAE decode of rank 0's band: 20 bytes per output pixel of the band's frames (the float
  frames, their concatenation), the steady chunk's working set (96 fp32 copies per pixel of the
  decoder's full-resolution channels; 32 where the Wan 2.2 VAE unpatchifies 2×2 at the end) and
  the uint8 video twice (the gathered bands and their concatenation);

then every such term is multiplied by MARGIN. tests/unit/test_plan_bound.py holds the bound at
or above the planner for every phase over a grid of models, meshes, dtypes, sizes, caches,
prompt batches and memory modes (it is 1.3–3× the planner's activations there), and far below a
device for the runs people start.
"""

from __future__ import annotations

import math

from ..config import RunSpec
from ..parallel.svg_mask import PROFILE_BYTES, SAMPLES
from .audio_encoder_bytes import audio_encoder_bytes
from .denoise_bytes import cache_bytes, rank_shapes
from .image_encoder_bytes import image_encoder_bytes
from .text_encoder_bytes import text_encoder_bytes
from .weight_bytes import expert_bytes, weight_bytes

MARGIN = 1.25  # on top of the generous counts: the grid's closest case is 1.07× the planner before it
TEXT_LEN = 512  # UMT5 tokens per prompt


def peak_bound(spec: RunSpec, tcfg, vcfg, text_shape) -> int:
    """Bytes no phase of this run exceeds on any device, by the planner's accounting (report.py)."""
    return max(phase_bounds(spec, tcfg, vcfg, text_shape).values())


def phase_bounds(spec: RunSpec, tcfg, vcfg, text_shape) -> dict:
    """For each of the planner's phases (`MemoryPlan.phases`, the same names), a number of bytes
    it does not exceed."""
    from ..models.transformer_shapes import param_shapes
    from ..models.vae_shapes import param_shapes as vae_param_shapes

    shapes = rank_shapes(spec, tcfg, vcfg)
    world = spec.mesh.world_size
    eb = expert_bytes(param_shapes(tcfg), spec.execution.dtype, world, spec.quantization.quantize)
    weights = weight_bytes(spec, eb)
    vae_weights = sum(math.prod(s) for s in vae_param_shapes(vcfg).values()) * 4
    prompts = len(spec.video.prompts)
    text = sum(text_encoder_bytes(text_shape, prompts, spec.uses_guidance)) + sum(image_encoder_bytes(spec))
    text += sum(audio_encoder_bytes(spec))

    width = 4 if spec.execution.dtype == "float32" else 2
    dim, units = tcfg.dim, shapes.rows * shapes.local
    per_token = spec.model.variant.per_token_timestep
    token_features = math.prod(tcfg.patch_size) * tcfg.out_channels
    tokens = shapes.batch * shapes.local * token_features * 4  # the sample, fp32
    loop = (
        units * (dim * (16 + 12 * width) + tcfg.ffn_dim * 2 * width + per_token * dim * 4 * 18)
        + shapes.rows * TEXT_LEN * dim * width * 6
        + 12 * tokens
    )
    if spec.sparse_attention.kind == "svg":  # q, k, v gathered into each head's order, out and lse
        # gathered back, the gather indices, the profile's scores (parallel/svg_mask.py)
        profile = min(PROFILE_BYTES, shapes.rows * SAMPLES * shapes.tokens * 4 * 3 * tcfg.num_attention_heads)
        loop += units * (6 * dim * width + 3 * 8 * tcfg.num_attention_heads) + profile
    context = (prompts + int(spec.uses_guidance)) * TEXT_LEN * (tcfg.text_dim + dim) * width
    cond = shapes.local * math.prod(tcfg.patch_size) * max(tcfg.in_channels - tcfg.out_channels, 0) * 4
    held = (
        2 * context
        + 2 * shapes.local * tcfg.attention_head_dim * 8
        + cond
        + tokens
        + shapes.local * 8
        + cache_bytes(spec, tcfg, shapes)
    )

    frames, height, width_px = spec.video.num_frames, spec.video.height, spec.video.width
    latent_rows = shapes.latent_shape[3]
    bands = min(world, latent_rows)
    band_pixels = -(-latent_rows // bands) * vcfg.scale_factor_spatial * width_px
    channels = vcfg.decoder_base_dim or vcfg.base_dim
    chunk = band_pixels * channels * 4 * (96 if vcfg.patch_size is None else 32)
    vae = frames * band_pixels * 20 + chunk + frames * height * width_px * 3 * 2
    latents = prompts * math.prod(shapes.latent_shape) * 4
    kept = held + tokens + (prompts * shapes.tokens * token_features * 4 if world > 1 else 0)

    return {
        "text encode (rank 0)": weights["encode"] + vae_weights + text,
        "denoise": weights["denoise"] + vae_weights + math.ceil(MARGIN * (held + loop)),
        "vae decode": weights["decode"] + vae_weights + latents + math.ceil(MARGIN * (vae + kept)),
    }
