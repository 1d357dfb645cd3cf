"""The orchestrator: one generation end to end, backend-agnostic (DESIGN.md steps 2–7).

Load → encode text once → draw noise on the host from the seed → denoise patch tokens with
the dual-expert loop (the host decides the expert and guidance per step; the device runs the
forward and the elementwise sampler update) → decode with the VAE → uint8 frames.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from .config import TASK_IN_CHANNELS, ConfigError, RunSpec
from .models import transformer as dit
from .models import vae
from .models.rope import rope_tables
from .sharding import SequenceShards
from .sampling import make_sampler, make_schedule, schedule_from_scheduler_config
from .timing import PhaseTimer

log = logging.getLogger("parallel_wan")

HIGH, LOW, SINGLE = "high_noise", "low_noise", "single"


@dataclass
class Generation:
    videos: list  # per prompt: (T, H, W, 3) uint8 frames — on the main rank; empty elsewhere
    latents: np.ndarray  # (prompts, C, T, h, w) float32, the final denoised latents
    timings: dict
    info: dict = field(default_factory=dict)

    @property
    def frames(self) -> np.ndarray | None:
        """The first (for one prompt: the only) video's frames; None off the main rank."""
        return self.videos[0] if self.videos else None


# ---------------------------------------------------------------- checkpoint
def preflight(spec: RunSpec):
    """Cheap checks of the checkpoint against the run (json and safetensors headers only).
    Returns the checkpoint description, or None for the built-in tiny model."""
    if spec.attention_impl == "xfuser":
        from .backends.torch.xfuser_attention import xfuser_unavailable_reason

        if xfuser_unavailable_reason():
            raise ConfigError(xfuser_unavailable_reason())
    if spec.checkpoint_dir is None:
        from .tiny import transformer_config

        check_heads(spec, transformer_config(spec.model.task))
        return None
    from .weights.layout import CheckpointError, describe_checkpoint

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
    from .config import mesh_spec

    m = spec.mesh
    mesh_spec({"name": m.name, "dp": m.dp, "cp": m.cp, "ulysses": m.ulysses, "ring": m.ring}, m.world_size,
              heads=tcfg.num_attention_heads)


def _materialize_tiny(spec: RunSpec, folder: str):
    from .tiny import build_tiny, write_checkpoint
    from .weights.layout import describe_checkpoint

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
    encoder: it encodes once and broadcasts the embeddings."""
    from .text.umt5 import TextEncoder
    from .weights.loader import load_transformer, load_vae

    def expert(name):
        params = load_transformer(ckpt, name, spec.dtype, dit.keeps_fp32)
        return name, (ckpt.transformers[name], backend.place(params, spec.dtype, dit.keeps_fp32))

    def vae_part():
        cfg, params = load_vae(ckpt, "float32")
        return cfg, backend.place(params, "float32")

    with ThreadPoolExecutor(max_workers=4) as pool:
        text_future = pool.submit(TextEncoder.load, ckpt, spec.dtype, backend.device) if backend.is_main else None
        vae_future = pool.submit(vae_part)
        expert_futures = [pool.submit(expert, name) for name in ckpt.experts]
        experts = dict(f.result() for f in expert_futures)
        vae_cfg, vae_params = vae_future.result()
        text_encoder = text_future.result() if text_future is not None else None
    return Loaded(ckpt, experts, vae_cfg, vae_params, text_encoder)


# ---------------------------------------------------------------- conditioning
def load_image(path: str, height: int, width: int) -> tuple[np.ndarray, dict]:
    """RGB image → ((1, 3, H, W) float32 in [-1, 1], a record for the sidecar).

    As diffusers' VideoProcessor.preprocess: the uint8 image is resized by PIL (Lanczos) to
    exactly height×width — stretched if the aspect ratio differs — then x/255·2 − 1 in float32.
    The official code keeps the aspect instead: I2V-A14B picks the output size from the image's
    aspect and `max_area` and resizes the [-1, 1] tensor bicubically; TI2V-5B scales (Lanczos)
    to cover `best_output_size` and centre-crops. We follow diffusers so a given height×width is
    honoured and a seed gives diffusers' video.
    """
    import hashlib

    from PIL import Image

    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    with Image.open(path) as im:
        im = im.convert("RGB")  # as the official generate.py; drops alpha, expands grey/palette
        size = im.size
        if size != (width, height):
            if abs(size[0] * height - size[1] * width) > 0.01 * size[1] * width:
                log.warning("image=%s is %dx%d; it is stretched to width=%d height=%d (aspect %.3f → %.3f), as "
                            "diffusers does; crop it first to keep its aspect", path, size[0], size[1], width, height,
                            size[0] / size[1], width / height)
            im = im.resize((width, height), resample=Image.LANCZOS)
        arr = np.asarray(im, dtype=np.float32) / 255.0
    record = {"path": os.path.abspath(path), "sha256": digest, "size": list(size), "resized_to": [width, height]}
    return (arr * 2.0 - 1.0).transpose(2, 0, 1)[None], record


def i2v_condition(image, num_frames: int, latent_frames: int, vae_cfg, vae_params, ops, backend):
    """I2V-A14B's 20 extra channels: a 4-channel first-frame mask (one channel per frame of
    the temporal stride) and the VAE latent of [image, black frames…]."""
    _, _, h, w = image.shape  # host array (1, 3, H, W)
    video = np.concatenate([image[:, :, None], np.zeros((1, 3, num_frames - 1, h, w), np.float32)], axis=2)
    latent = vae.normalize_latents(vae.encode(vae_params, backend.to_device(video), ops, vae_cfg), vae_cfg, ops)
    stride = vae_cfg.scale_factor_temporal
    lh, lw = latent.shape[-2:]
    mask = np.zeros((1, stride, latent_frames, lh, lw), np.float32)
    mask[:, :, 0] = 1.0  # the first latent frame carries the given image (all `stride` sub-frames)
    return ops.concat([backend.to_device(mask), latent], axis=1)


def ti2v_first_frame(image, latent_frames, grid, vae_cfg, tcfg, vae_params, ops, backend):
    """TI2V-5B: the image's latent is the first latent frame, re-imposed every step (its tokens
    see t = 0). Returns the tokens to hold and a (tokens, 1) mask, 0 where held.

    The official code writes the latent back into the sampler's state after each step;
    diffusers only into the model's input (and once after the loop). Both give the same video:
    the sampler update is elementwise, so the held tokens' sampler state never reaches another
    token. The image is encoded alone (one frame), not as [image, black frames] as for I2V.
    """
    z = vae.encode(vae_params, backend.to_device(image[:, :, None]), ops, vae_cfg)
    z = vae.normalize_latents(z, vae_cfg, ops)
    rest = ops.zeros((1, z.shape[1], latent_frames - 1) + tuple(z.shape[-2:]), "float32", like=z)
    held = dit.patchify(ops.concat([z, rest], axis=2), tcfg.patch_size, ops)
    mask = np.ones((math.prod(grid), 1), np.float32)
    mask[: grid[1] * grid[2]] = 0.0
    return held, mask


# ---------------------------------------------------------------- the loop
def pick_schedule(spec: RunSpec, ckpt):
    kind = spec.schedule
    if kind == "auto":
        kind = "diffusers" if ckpt.scheduler_config is not None else "official"
    if kind == "diffusers" and ckpt.scheduler_config is not None:
        return kind, schedule_from_scheduler_config(ckpt.scheduler_config, spec.steps, spec.shift)
    return kind, make_schedule(kind, spec.steps, spec.shift)


def expert_for(t: float, spec: RunSpec) -> str:
    if spec.model.experts == 1:
        return SINGLE
    return HIGH if t >= spec.model.boundary * 1000 else LOW


@dataclass(frozen=True)
class RankWork:
    """What this rank computes: a slice of the token sequence, for a set of prompts, with one
    or both CFG halves."""

    shards: SequenceShards
    cp_index: int
    rows: tuple[int, ...]  # indices of the prompts this rank's dp group denoises (one batch)
    cfg_branch: int | None  # 0 = cond, 1 = uncond (CFG parallel over dp); None = both here

    def local(self, full_tokens, backend):
        """This rank's tokens of a (B, N, F) device array, zero-padded past N."""
        ops = backend.ops
        pad = self.shards.padding
        if pad:
            full_tokens = ops.pad(full_tokens, [(0, 0), (0, pad), (0, 0)])
        start, stop = self.shards.bounds(self.cp_index)
        return full_tokens[:, start:stop]


def plan_work(spec: RunSpec, tokens: int, backend) -> RankWork:
    """dp carries the CFG halves of one prompt (dp = 2), or splits several prompts into equal
    batches; cp splits the tokens. config.resolve has checked the counts fit."""
    dp, n = spec.mesh.dp, len(spec.prompts)
    shards = SequenceShards(tokens, spec.mesh.cp)
    if n == 1 and dp == 2:
        return RankWork(shards, backend.index("cp"), (0,), backend.index("dp"))
    per = n // dp
    first = backend.index("dp") * per
    return RankWork(shards, backend.index("cp"), tuple(range(first, first + per)), None)


def guidance_context(context, work: RankWork, n_prompts: int, uses_guidance: bool, ops):
    """Rows of the text context for this rank's forward: [cond rows] or [cond rows ‖ negative ×
    B], or one half under CFG parallel. `context` holds every prompt, then the negative."""
    cond = ops.take(context, list(work.rows), axis=0)
    negative = ops.concat([context[n_prompts : n_prompts + 1]] * len(work.rows), axis=0)
    if not uses_guidance:
        return cond, 1
    if work.cfg_branch is None:
        return ops.concat([cond, negative], axis=0), 2
    return (cond if work.cfg_branch == 0 else negative), 1


def denoise(spec, loaded, context, schedule, noise_tokens, grid, backend, progress, work: RankWork,
            cond_tokens=None, fixed_tokens=None, fixed_mask=None):
    """Run every step on this rank's tokens (B prompts × Lc tokens; all arrays here are already
    this rank's slice). `cond_tokens`: I2V channels joined to the input; `fixed_tokens` /
    `fixed_mask` (TI2V first frame, (Lc, 1) host array, 0 where held): tokens held at the image
    latent, with t = 0."""
    ops = backend.ops
    tcfg = next(iter(loaded.experts.values()))[0]
    cos, sin = rope_tables(tcfg.attention_head_dim, grid, token_index=work.shards.token_index(work.cp_index))
    rope = (backend.to_device(cos), backend.to_device(sin))
    attention = backend.self_attention_for(work.shards)
    sampler = make_sampler(spec.sampler, schedule)
    ctx, halves = guidance_context(context, work, len(spec.prompts), spec.uses_guidance, ops)
    batch, n_tokens = noise_tokens.shape[0], noise_tokens.shape[1]
    if cond_tokens is not None:
        cond_tokens = ops.concat([cond_tokens] * batch, axis=0)
    # TI2V-5B takes one timestep per token (diffusers' expand_timesteps), with or without an image.
    per_token = spec.model.task == "ti2v"
    keep = None if fixed_mask is None else backend.to_device(fixed_mask.astype(np.float32))  # 1 = denoised

    x = noise_tokens
    for i, t in enumerate(progress(schedule.timesteps)):
        t = float(t)
        name = expert_for(t, spec)
        _, params = loaded.experts[name]
        guidance = spec.guidance_low if name == LOW else spec.guidance_high
        if keep is not None:
            x = ops.where(keep > 0, x, fixed_tokens)
        x_in = x if cond_tokens is None else dit.join_channels([x, cond_tokens], tcfg.patch_size, ops)
        x_in = ops.concat([x_in] * halves, axis=0) if halves == 2 else x_in
        rows = halves * batch
        if per_token:
            ts = np.full((rows, n_tokens), t, np.float32) * (1.0 if fixed_mask is None else fixed_mask[None, :, 0])
        else:
            ts = np.full((rows,), t, np.float32)
        out = ops.cast(dit.forward(params, x_in, backend.to_device(ts), ctx, rope, tcfg, ops, attention), "float32")
        if work.cfg_branch is not None:
            out = ops.concat(backend.exchange_dp(out), axis=0)  # the two halves meet once per step
        pred = out[batch:] + guidance * (out[:batch] - out[batch:]) if spec.uses_guidance else out
        x = sampler.step(pred, x, i, ops)
    if keep is not None:
        x = ops.where(keep > 0, x, fixed_tokens)
    return x


def draw_noise(spec: RunSpec, rows, latent_shape, backend, patch_size):
    """Patch tokens of each prompt's noise, drawn as the official code draws it: a CPU
    generator seeded with the prompt's seed, float32. Every rank draws the same full noise
    (cheap, on the host) and keeps its slice, so the video does not depend on the mesh."""
    import torch

    ops = backend.ops
    noise = [torch.randn(latent_shape, generator=torch.Generator("cpu").manual_seed(spec.seed_of(r)),
                         dtype=torch.float32) for r in rows]
    return dit.patchify(backend.to_device(torch.cat(noise).numpy()), patch_size, ops)


def to_uint8_frames(video, ops):
    """(1, 3, T, H, W) in [-1, 1] → (T, H, W, 3) uint8, rounded (made on the device)."""
    v = ops.round(ops.clip((video[0] + 1.0) * 127.5, 0.0, 255.0))
    return ops.cast(ops.transpose(v, (1, 2, 3, 0)), "uint8")


def generate(spec: RunSpec, backend, ckpt=None, progress=None) -> Generation:
    ops = backend.ops
    timer = PhaseTimer(backend.synchronize)
    progress = progress or (lambda it: it)
    with tempfile.TemporaryDirectory(prefix="parallel_wan_tiny_") as tiny_dir, backend.inference_mode():
        with timer.phase("load"):
            if ckpt is None:
                ckpt = _materialize_tiny(spec, tiny_dir) if spec.checkpoint_dir is None else preflight(spec)
            loaded = load_components(spec, ckpt, backend)
        log.info("loaded %s checkpoint (%s) in %.1f s", ckpt.layout, ", ".join(sorted(loaded.experts)),
                 timer.seconds["load"])

        with timer.phase("text"):
            context = None
            if backend.is_main:
                from .text.umt5 import DEFAULT_NEGATIVE_PROMPT

                negative = DEFAULT_NEGATIVE_PROMPT if spec.negative_prompt is None else spec.negative_prompt
                context = loaded.text_encoder.encode([*spec.prompts, negative])  # one batched call
                loaded.text_encoder.release()
            context = ops.cast(backend.broadcast_from_main(context), spec.dtype)

        vcfg = loaded.vae_config
        latent_frames = (spec.num_frames - 1) // vcfg.scale_factor_temporal + 1
        lh, lw = spec.height // vcfg.scale_factor_spatial, spec.width // vcfg.scale_factor_spatial
        tcfg = next(iter(loaded.experts.values()))[0]
        noise_channels = tcfg.out_channels
        latent_shape = (1, noise_channels, latent_frames, lh, lw)
        grid = dit.patch_grid(tcfg, latent_shape)

        cond_tokens = fixed_tokens = fixed_mask = image_record = None
        if spec.image is not None:
            with timer.phase("vae_encode"):
                image, image_record = load_image(spec.image, spec.height, spec.width)
                if spec.model.task == "i2v":
                    cond = i2v_condition(image, spec.num_frames, latent_frames, vcfg, loaded.vae_params, ops, backend)
                    cond_tokens = dit.patchify(cond, tcfg.patch_size, ops)
                else:
                    fixed_tokens, fixed_mask = ti2v_first_frame(image, latent_frames, grid, vcfg, tcfg,
                                                                loaded.vae_params, ops, backend)

        schedule_kind, schedule = pick_schedule(spec, ckpt)
        work = plan_work(spec, math.prod(grid), backend)
        tokens = draw_noise(spec, work.rows, latent_shape, backend, tcfg.patch_size)
        if cond_tokens is not None:
            cond_tokens = work.local(cond_tokens, backend)
        if fixed_tokens is not None:
            fixed_tokens = work.local(fixed_tokens, backend)
            fixed_mask = work.shards.shard(fixed_mask, work.cp_index, axis=0)

        with timer.phase("denoise"):
            local = denoise(spec, loaded, context, schedule, work.local(tokens, backend), grid, backend, progress,
                            work, cond_tokens, fixed_tokens, fixed_mask)
            # The one gather, for the VAE: tokens over cp, then each dp group's prompts.
            tokens = backend.gather_tokens(local)[:, : work.shards.tokens]
            if work.cfg_branch is None and spec.mesh.dp > 1:
                tokens = ops.concat(backend.exchange_dp(tokens), axis=0)
        latents = dit.unpatchify(tokens, grid, tcfg.patch_size, ops)

        videos = []
        if backend.is_main:
            with timer.phase("vae_decode"):
                for row in range(latents.shape[0]):
                    z = vae.denormalize_latents(latents[row : row + 1], vcfg, ops)
                    video = vae.decode(loaded.vae_params, z, ops, vcfg)
                    videos.append(backend.to_host(to_uint8_frames(video, ops)).astype(np.uint8))

    steps_per_expert = {}
    for t in schedule.timesteps:
        name = expert_for(float(t), spec)
        steps_per_expert[name] = steps_per_expert.get(name, 0) + 1
    info = {
        "checkpoint": {"layout": ckpt.layout, "path": spec.checkpoint_dir or "built-in tiny model"},
        "schedule": schedule_kind,
        "timesteps": [float(t) for t in schedule.timesteps],
        "steps_per_expert": steps_per_expert,
        "latent_shape": list(latent_shape),
        "device": str(backend.device),
        "mesh": {"name": spec.mesh.name, "dp": spec.mesh.dp, "cp": spec.mesh.cp, "ulysses": spec.mesh.ulysses,
                 "ring": spec.mesh.ring, "tokens": work.shards.tokens, "tokens_per_rank": work.shards.local,
                 "padding": work.shards.padding},
    }
    if image_record is not None:
        info["image"] = image_record
    info["videos"] = [{"prompt": p, "seed": spec.seed_of(i)} for i, p in enumerate(spec.prompts)]
    return Generation(videos=videos, latents=backend.to_host(latents), timings=timer.as_dict(), info=info)
